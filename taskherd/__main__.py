"""`python -m taskherd`: the same CLI as the `taskherd` script, without needing it on PATH."""

from taskherd.cli import main

if __name__ == "__main__":
    main()
