from gateway.main import main

main()
