"""A run's results: per-document metric values aggregated into lm-eval's results dict
(`aggregate`), and that dict on disk and on screen, with lm-eval's file names (`files`)."""
