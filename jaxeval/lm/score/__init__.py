"""Loglikelihood scoring on the host side: the finite bucket set (`buckets`), request packing
into fixed-shape batches (`planner`, `shaping`) and the owner of the compiled score kernels
(`scorer`)."""
