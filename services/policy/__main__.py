from services.policy.main import main

main()
