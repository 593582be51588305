"""`python -m train`: see `python -m train --help`."""

import json

from . import cli, distributed, loop


def main(argv=None):
    args = cli.parse(argv)
    if args.check:
        cli.check_world(args, args.check)
        print(json.dumps(vars(args), default=str))
        return
    group = distributed.init()
    with distributed.stop_all_on_error(group):
        distributed.check_size(group)
        cli.check_world(args, group.size())
        loop.run(args, group)


if __name__ == "__main__":
    main()
