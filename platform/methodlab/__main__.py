from methodlab.cli.main import main

main()
