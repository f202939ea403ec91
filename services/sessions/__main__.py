from services.sessions.main import main

main()
