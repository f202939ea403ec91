from gateway.web.main import main

main()
