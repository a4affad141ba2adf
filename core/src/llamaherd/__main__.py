from llamaherd.cli import main

main()
