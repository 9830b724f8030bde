"""Load nanotron exports with nanotron's own config loader (`get_config_from_file`, strict dacite);
print what it read, as JSON lines. Usage: nanotron_parse.py FILE...

nanotron 0.4 as published cannot import its config package: nanotron.config.config imports (through
utils_config and the pipeline engine) nanotron.logging, which imports LoggingArgs from the half-loaded
nanotron.config.config, whichever of the two is imported first. The loop is broken here by standing in
a plain-`logging` module for nanotron.logging while nanotron.config loads, then importing the real
nanotron.logging; the parser itself (get_config_from_file, its dataclasses, their __post_init__ checks,
dacite with strict=True) is nanotron's, unchanged.
"""
import json
import logging
import sys
import types

stand_in = types.ModuleType("nanotron.logging")
stand_in.__dict__.update({k: v for k, v in vars(logging).items() if not k.startswith("__")})
stand_in.get_logger = logging.getLogger
for name in ("log_rank", "warn_once", "human_format", "LogItem"):
    setattr(stand_in, name, lambda *a, **k: None)
sys.modules["nanotron.logging"] = stand_in
import nanotron.config  # noqa: E402

del sys.modules["nanotron.logging"]
import nanotron.logging  # noqa: E402,F401  the real one, now that nanotron.config is whole
from nanotron.config import get_config_from_file  # noqa: E402


def main(paths: list[str]) -> None:
    for path in paths:
        cfg = get_config_from_file(path)
        p, m, t = cfg.parallelism, cfg.model.model_config, cfg.tokens
        print(json.dumps({"path": path, "dp": p.dp, "tp": p.tp, "pp": p.pp, "pp_engine": type(p.pp_engine).__name__,
                          "tp_mode": p.tp_mode.name, "zero_stage": cfg.optimizer.zero_stage,
                          "global_batch": cfg.global_batch_size, "seq_len": t.sequence_length,
                          "model": type(m).__name__, "layers": m.num_hidden_layers, "kv_heads": m.num_key_value_heads,
                          "dtype": str(cfg.model.dtype)}))


if __name__ == "__main__":
    main(sys.argv[1:])
