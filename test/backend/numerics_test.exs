if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.NumericsTest do
    # One numeric contract per op and device (docs/numerics.md), through
    # Nx: a float32 value's result has the same bits whatever the size of
    # the tensor it is in, eager on ExMLX.Backend, compiled by
    # ExMLX.Compiler, and compiled with `fuse: true` (the op followed by two
    # negations, exact, so that element-wise groups form around it). The
    # reference is the eager op applied once to a tensor of all the values.
    use ExUnit.Case, async: true

    alias ExMLX.NumericsCases, as: Cases

    @device :cpu
    @backend {ExMLX.Backend, device: @device}

    @unary [:abs, :negate, :sign, :floor, :ceil, :round, :sqrt, :rsqrt, :cbrt, :exp] ++
             [:expm1, :log, :log1p, :sin, :cos, :tan, :asin, :acos, :atan, :sinh, :cosh] ++
             [:tanh, :asinh, :acosh, :atanh, :erf, :erfc, :erf_inv, :sigmoid]
    @binary [:add, :subtract, :multiply, :divide, :pow, :remainder, :atan2, :min, :max]

    defp tensor(binary) do
      Nx.from_binary(binary, :f32, backend: @backend)
    end

    defp modes(op, arity) do
      fused =
        case arity do
          1 -> fn x -> apply(Nx, op, [x]) |> Nx.negate() |> Nx.negate() end
          2 -> fn x, y -> apply(Nx, op, [x, y]) |> Nx.negate() |> Nx.negate() end
        end

      [
        eager: fn args -> apply(Nx, op, args) end,
        compiled: fn args ->
          Nx.Defn.jit_apply(Function.capture(Nx, op, arity), args, compiler: ExMLX.Compiler)
        end,
        fused: fn args ->
          Nx.Defn.jit_apply(fused, args, compiler: ExMLX.Compiler, fuse: true)
        end
      ]
    end

    defp check(op, references) do
      [first | _] = references
      reference = apply(Nx, op, Enum.map(references, &tensor/1)) |> Nx.to_binary()

      for size <- Cases.sizes(),
          {offset, _} <- Cases.placed(first, size),
          {mode, run} <- modes(op, length(references)) do
        inputs =
          Enum.map(references, fn values ->
            {^offset, binary} = Enum.find(Cases.placed(values, size), &(elem(&1, 0) == offset))
            tensor(binary)
          end)

        result = run.(inputs) |> Nx.to_binary()

        assert Cases.compare(result, reference, offset) == :ok,
               "#{op} #{mode} of #{size} values at offset #{offset}"
      end
    end

    test "every unary float op: eager, compiled and fused give a value the same bits at every size" do
      values = Cases.values()
      for op <- @unary, do: check(op, [values])
    end

    test "every binary float op: eager, compiled and fused give a pair the same bits at every size" do
      values = Cases.values()
      <<head::binary-size(13 * 4), tail::binary>> = values
      for op <- @binary, do: check(op, [values, tail <> head])
    end
  end
end
