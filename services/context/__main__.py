from services.context.main import main

main()
