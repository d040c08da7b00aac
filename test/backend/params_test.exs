if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.ParamsTest do
    # ExMLX.Params.share_equal/2: equal tensors of a container become one,
    # bit for bit; the bytes of the replaced ones are freed.
    use ExUnit.Case, async: false

    doctest ExMLX.Params

    alias ExMLX.{Memory, Params, TestHelpers}

    # A tensor of `values` (floats), read from its own binary: equal lists
    # give equal tensors that share nothing.
    defp tensor(values, type \\ {:f, 32}) do
      {_, bits} = type

      binary =
        case type do
          {:bf, 16} -> for x <- values, into: <<>>, do: bf16(x)
          {:f, _} -> for x <- values, into: <<>>, do: <<x::float-size(bits)-little>>
        end

      Nx.from_binary(binary, type, backend: ExMLX.Backend)
    end

    # (bf16: the top half of the float32's bits)
    defp bf16(x) do
      <<top::16, _::16>> = <<x::float-32-big>>
      <<top::16-little>>
    end

    defp values(n, seed), do: TestHelpers.pseudo_random(n, 1.0, seed)

    test "equal tensors become the first of them, in the container's order" do
      # (600,000 elements: bf16 ones of at least the default :min_bytes too)
      a = values(600_000, 1)
      b = values(600_000, 2)

      params = %{
        "embedder" => %{"kernel" => tensor(a), "scale" => tensor(b)},
        "head" => %{"kernel" => tensor(a)},
        "layers" => {tensor(b), tensor(a, {:bf, 16}), tensor(a, {:bf, 16})}
      }

      shared = Params.share_equal(params)
      {b1, bf_1, bf_2} = shared["layers"]

      # Composite's order: map keys sorted, so "embedder"'s kernel first
      assert shared["head"]["kernel"] == shared["embedder"]["kernel"]
      assert shared["embedder"]["kernel"] == params["embedder"]["kernel"]
      assert b1 == shared["embedder"]["scale"]
      assert bf_2 == bf_1
      refute bf_1 == shared["head"]["kernel"]
      refute shared["embedder"]["scale"] == shared["embedder"]["kernel"]

      assert Nx.to_binary(shared["head"]["kernel"]) == Nx.to_binary(params["head"]["kernel"])
      assert Nx.to_binary(bf_2) == Nx.to_binary(elem(params["layers"], 2))
    end

    test "values compared bit for bit: -0.0 is not 0.0, one element apart is not equal" do
      n = 300_000
      zeros = List.duplicate(0.0, n)
      # position 1,000 is in none of the blocks compared first (the first,
      # middle and last four elements)
      one_apart = List.replace_at(values(n, 3), 1_000, 5.0)

      params = %{
        "a" => tensor(zeros),
        "b" =>
          Nx.from_binary(:binary.copy(<<0, 0, 0, 0x80>>, n), {:f, 32}, backend: ExMLX.Backend),
        "c" => tensor(values(n, 3)),
        "d" => tensor(one_apart)
      }

      shared = Params.share_equal(params)
      assert shared == params
    end

    test "tensors below :min_bytes, of other shapes, or on another backend are left alone" do
      small = values(1_000, 4)
      params = {tensor(small), tensor(small)}
      assert Params.share_equal(params) == params

      {a, b} = Params.share_equal(params, min_bytes: 4_000)
      assert a == b

      big = values(262_144, 5)
      reshaped = %{"flat" => tensor(big), "matrix" => Nx.reshape(tensor(big), {512, 512})}
      assert Params.share_equal(reshaped) == reshaped

      # (the same values on another backend: sharing would move a parameter)
      elsewhere = %{"a" => tensor(big), "b" => Nx.backend_copy(tensor(big), Nx.BinaryBackend)}
      assert Params.share_equal(elsewhere) == elsewhere
    end

    test "the replaced tensors' bytes are freed once the container given is gone" do
      n = 1_048_576
      a = values(n, 6)
      TestHelpers.settle()
      baseline = Memory.stats().active

      shared = Params.share_equal(%{"x" => tensor(a), "y" => tensor(a), "z" => tensor(a)})

      assert shared["x"] == shared["y"] and shared["y"] == shared["z"]
      # one tensor of 4 MiB left (and whatever other tests freed meanwhile)
      assert TestHelpers.settle_to(baseline, 4 * n + 65_536) - baseline <= 4 * n + 65_536
      assert Nx.to_binary(shared["z"]) == for(x <- a, into: <<>>, do: <<x::float-32-little>>)
    end

    test "a bad :min_bytes and an unknown option are errors that name them" do
      assert_raise ArgumentError, ":min_bytes must be a non-negative integer, got: -1", fn ->
        Params.share_equal(%{}, min_bytes: -1)
      end

      assert_raise ArgumentError, ~r/unknown keys \[:bytes\]/, fn ->
        Params.share_equal(%{}, bytes: 1)
      end
    end

    test "a tensor shared by two parameters is quantized once and stays shared" do
      table = tensor(values(64 * 128, 7)) |> Nx.reshape({128, 64})

      params =
        Params.share_equal(
          %{
            "embedding" => %{"kernel" => table},
            "head" => %{"kernel" => Nx.reshape(tensor(values(64 * 128, 7)), {128, 64})},
            "other_embedding" => %{"kernel" => Nx.reshape(tensor(values(64 * 128, 8)), {128, 64})}
          },
          min_bytes: 0
        )

      assert params["head"]["kernel"] == params["embedding"]["kernel"]

      # (every layer an embedding: each table grouped along its last axis)
      quantized =
        ExMLX.Quantization.quantize_params(params,
          bits: 4,
          group_size: 64,
          embedding?: fn _layer -> true end
        )

      assert ExMLX.Quantization.quantized?(quantized["head"]["kernel"])
      assert quantized["head"]["kernel"] == quantized["embedding"]["kernel"]
      refute quantized["other_embedding"]["kernel"] == quantized["embedding"]["kernel"]
    end
  end
end
