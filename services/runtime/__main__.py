from services.runtime.main import main

main()
