from gateway.serve import main

raise SystemExit(main())
