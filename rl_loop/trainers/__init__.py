"""The loop's trainers on TRL + accelerate: the same code on one CPU process, on N CPU processes
(gloo DDP) and on GPUs (DDP, FSDP2, DeepSpeed ZeRO-3; LoRA through PEFT).

- ``sft``: SFT / distillation on TRL's ``SFTTrainer`` (conversational prompt-completion data
  with tools, loss on the assistant turn).
- ``dpo``: preference training on TRL's ``DPOTrainer`` with the exported pairs (edits and
  rejected answers become signal).
- ``onpolicy``: on-policy RL (truncated IS against the replicas' logprobs, KL to the served
  model, hint self-distillation, on-policy distillation from a teacher's logprobs) on
  transformers' ``Trainer``.
- ``engine``: what they share (arguments, schedule, batch order, reference model, figures).

Every trainer scores tokens through ``rl_loop.scoring`` and computes ``rl_loop.losses``.
``python -m rl_loop.train --config job.yaml`` runs them from a file, under ``accelerate
launch`` or not; ``rl_loop.loop`` runs them in a flywheel round.
"""
