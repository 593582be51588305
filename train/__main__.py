"""`python -m train`: see `python -m train --help`."""

import json
import sys

from . import cli, command


def main(argv=None):
    args = cli.parse(argv)
    if args.check:
        cli.check_world(args, args.check)
        # batch: the split train.yml shows with the request
        batch = {} if args.command else {"batch": cli.describe_batch(args, args.check)}
        print(json.dumps(vars(args) | batch, default=str))
        return
    if args.command is not None:
        sys.exit(command.run(args))
    from . import distributed, loop  # MLX: only for training

    distributed.first_out_of_memory()
    group = distributed.init()
    with distributed.stop_all_on_error(group):
        distributed.check_size(group)
        cli.check_world(args, group.size())
        loop.run(args, group)


if __name__ == "__main__":
    main()
