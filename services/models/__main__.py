from services.models.main import main

main()
