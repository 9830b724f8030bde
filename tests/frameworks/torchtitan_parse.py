"""Parse torchtitan exports with torchtitan's own ConfigManager; print what it read, as JSON lines.

Run by tests/test_export_frameworks.py with the Python of a virtual environment that holds the
torchtitan release under test. Usage: torchtitan_parse.py {0.3|0.2} FILE...
"""
import json
import shlex
import sys
import warnings

warnings.filterwarnings("ignore")
from torchtitan.config import ConfigManager  # noqa: E402


def main(form: str, paths: list[str]) -> None:
    for path in paths:
        text = open(path).read()
        if form == "0.3":  # command-line overrides of a config_registry function
            cfg = ConfigManager().parse_args(shlex.split(text, comments=True))
            ac = type(cfg.activation_checkpoint).__qualname__ if cfg.activation_checkpoint is not None else "none"
        else:  # 0.2.x TOML job file
            cfg = ConfigManager().parse_args(["--job.config_file", path])
            ac = cfg.activation_checkpoint.mode
        p, t = cfg.parallelism, cfg.training
        f8 = cfg.quantize.linear.float8 if form == "0.2" else None
        print(json.dumps({"path": path, "replicate": p.data_parallel_replicate_degree, "shard": p.data_parallel_shard_degree,
                          "tp": p.tensor_parallel_degree, "pp": p.pipeline_parallel_degree, "cp": p.context_parallel_degree,
                          "ep": p.expert_parallel_degree, "schedule": p.pipeline_parallel_schedule,
                          "microbatch": p.pipeline_parallel_microbatch_size, "local_batch": t.local_batch_size,
                          "global_batch": t.global_batch_size, "seq_len": t.seq_len, "reshard": p.fsdp_reshard_after_forward,
                          "activation_checkpoint": ac,
                          "float8": None if f8 is None else [f8.enable_fsdp_float8_all_gather,
                                                             f8.precompute_float8_dynamic_scale_for_fsdp, list(f8.filter_fqns)]}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
