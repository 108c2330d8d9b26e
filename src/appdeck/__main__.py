from appdeck.cli import main

main()
