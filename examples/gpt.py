"""The small GPT of ``trnsim.examples.gpt`` (model, AdamW, stdlib character corpus), re-exported here.

    python examples/gpt.py --steps 20 --dtype bfloat16
    trnsim cache warm examples/gpt.py          # pre-compile the programs `trnsim demo` runs
"""

from __future__ import annotations

from trnsim.examples.gpt import (
    CORPUS_FILES,
    DEMO_BATCH,
    DEMO_RUNS,
    CharTokenizer,
    GPTConfig,
    OptState,
    Params,
    TrainStep,
    adamw_update,
    attention,
    batches,
    forward,
    gelu_tanh,
    init_opt_state,
    init_params,
    load_corpus,
    loss_fn,
    lower_train_step,
    main,
    make_train_step,
    rms_norm,
    step_module,
    train_step,
    trnsim_programs,
)

__all__ = [
    "CORPUS_FILES",
    "DEMO_BATCH",
    "DEMO_RUNS",
    "CharTokenizer",
    "GPTConfig",
    "OptState",
    "Params",
    "TrainStep",
    "adamw_update",
    "attention",
    "batches",
    "forward",
    "gelu_tanh",
    "init_opt_state",
    "init_params",
    "load_corpus",
    "loss_fn",
    "lower_train_step",
    "main",
    "make_train_step",
    "rms_norm",
    "step_module",
    "train_step",
    "trnsim_programs",
]

if __name__ == "__main__":
    main()
