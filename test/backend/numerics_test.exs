if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.NumericsTest do
    # One numeric contract per op and device (docs/numerics.md), through
    # Nx: a float32 value's result has the same bits whatever the size of
    # the tensor it is in, eager on ExMLX.Backend and compiled by
    # ExMLX.Compiler, on every device; with `fuse: true` (the op followed by
    # two negations, exact, so that element-wise groups form around it) the
    # same bits on the CPU, and on a GPU, where MLX's compile generates the
    # kernels, within @gpu_fused_ulps. The reference is the eager op applied
    # once to a tensor of all the values.
    use ExUnit.Case, async: true

    alias ExMLX.NumericsCases, as: Cases

    @devices if ExMLX.device_available?(:gpu), do: [:cpu, :gpu], else: [:cpu]

    # the most units in the last place a fused GPU result may be from the
    # unfused one (docs/numerics.md)
    @gpu_fused_ulps 4

    @unary [:abs, :negate, :sign, :floor, :ceil, :round, :sqrt, :rsqrt, :cbrt, :exp] ++
             [:expm1, :log, :log1p, :sin, :cos, :tan, :asin, :acos, :atan, :sinh, :cosh] ++
             [:tanh, :asinh, :acosh, :atanh, :erf, :erfc, :erf_inv, :sigmoid]
    @binary [:add, :subtract, :multiply, :divide, :pow, :remainder, :atan2, :min, :max]

    defp modes(op, arity, device) do
      fused =
        case arity do
          1 -> fn x -> apply(Nx, op, [x]) |> Nx.negate() |> Nx.negate() end
          2 -> fn x, y -> apply(Nx, op, [x, y]) |> Nx.negate() |> Nx.negate() end
        end

      [
        eager: fn args -> apply(Nx, op, args) end,
        compiled: fn args ->
          Nx.Defn.jit_apply(Function.capture(Nx, op, arity), args,
            compiler: ExMLX.Compiler,
            device: device
          )
        end,
        fused: fn args ->
          Nx.Defn.jit_apply(fused, args, compiler: ExMLX.Compiler, fuse: true, device: device)
        end
      ]
    end

    # The widest distance of a fused GPU result over every op and size.
    defp check(op, references, device) do
      tensor = &Nx.from_binary(&1, :f32, backend: {ExMLX.Backend, device: device})
      reference = apply(Nx, op, Enum.map(references, tensor)) |> Nx.to_binary()

      for size <- Cases.sizes(),
          {offset, binaries} <- Cases.placed_together(references, size),
          {mode, run} <- modes(op, length(references), device),
          reduce: 0 do
        widest ->
          result = run.(Enum.map(binaries, tensor)) |> Nx.to_binary()
          label = "#{op} #{mode} on #{device}, #{size} values at offset #{offset}"

          if device == :gpu and mode == :fused do
            ulps = Cases.max_ulps(result, reference, offset)
            assert ulps != :infinity and ulps <= @gpu_fused_ulps, "#{label}: #{ulps} ulp"
            max(widest, ulps)
          else
            assert Cases.compare(result, reference, offset) == :ok, label
            widest
          end
      end
    end

    for device <- @devices do
      @device device

      test "every unary float op on #{device}: eager, compiled and fused agree at every size" do
        values = Cases.values()
        widest = Enum.map(@unary, &check(&1, [values], @device)) |> Enum.max()
        if @device == :gpu, do: IO.puts("\n  fused unary ops on the GPU: at most #{widest} ulp")
      end

      test "every binary float op on #{device}: eager, compiled and fused agree at every size" do
        values = Cases.values()
        <<head::binary-size(13 * 4), tail::binary>> = values
        widest = Enum.map(@binary, &check(&1, [values, tail <> head], @device)) |> Enum.max()
        if @device == :gpu, do: IO.puts("\n  fused binary ops on the GPU: at most #{widest} ulp")
      end
    end
  end
end
