"""Training: the Lightning modules over a frozen pair (the DIVERSED head by REINFORCE, a draft
distilled towards its target), their prompts and teacher samples, and checkpoints that resume
bit for bit. The entry points are `diversed.train` and `diversed.distill`.
"""
