# Tests tagged :gpu need MLX's GPU (the staged suite runs them on a GPU
# machine, bench/gpu/run.sh suite).
exclude = if ExMLX.device_available?(:gpu), do: [], else: [:gpu]
ExUnit.start(exclude: exclude)
