from gateway.serve import main

main()
