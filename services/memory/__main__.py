from services.memory.main import main

main()
