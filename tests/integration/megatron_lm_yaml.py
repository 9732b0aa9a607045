"""Write the example script's config as a Megatron-LM YAML (`PretrainConfigContainer.to_yaml`):
`python megatron_lm_yaml.py OUT.yaml [EXTRA ARGS...]`."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(out: str, extra: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    import pretrain_gpt_tiny as script
    from megatron.training.argument_utils import gpt_config_from_args, pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_args, validate_args

    sys.argv = ["megatron_lm_yaml.py", *script.TINY_GPT, *extra]
    args = parse_args()
    validate_args(args)
    pretrain_cfg_container_from_args(args, gpt_config_from_args(args)).to_yaml(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
