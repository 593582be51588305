"""`python -m train`: see `python -m train --help`."""

from . import cli, distributed, loop


def main(argv=None):
    args = cli.parse(argv)
    group = distributed.init()
    with distributed.stop_all_on_error(group):
        distributed.check_size(group)
        cli.check_world(args, group.size())
        loop.run(args, group)


if __name__ == "__main__":
    main()
