defmodule ExMLX.PredictionTest do
  # The element-wise ops and matmul return before MLX has built their
  # result, with a predicted shape and type the worker then checks.
  use ExUnit.Case, async: true

  alias ExMLX.{Call, Prediction}
  import ExMLX.TestHelpers, only: [types: 0]

  # A result as its shape, type and bytes, or the error that making or
  # reading it raised (CUDA, for one, refuses some complex64 kernels only
  # when they run).
  defp outcome(make) do
    t = make.()
    {t.shape, t.type, ExMLX.to_binary(t)}
  rescue
    e in ExMLX.Error -> {:error, e.message}
  end

  test "broadcasting follows NumPy's rules" do
    assert Prediction.broadcast({2, 1, 3}, {4, 1}) == {:ok, {2, 4, 3}}
    assert Prediction.broadcast({}, {5}) == {:ok, {5}}
    assert Prediction.broadcast({0, 1}, {1, 7}) == {:ok, {0, 7}}
    assert Prediction.broadcast({3}, {3}) == {:ok, {3}}
    assert Prediction.broadcast({3}, {4}) == :error
    assert Prediction.broadcast({2, 3}, {3, 2}) == :error
  end

  test "every type pair and op: the prediction is what MLX produces, values included" do
    for op <- ExMLX.binary_ops(), ta <- types(), tb <- types() do
      # both on the CPU when either is f64 (see device_for/1)
      on = [device: if({:f, 64} in [ta, tb], do: :cpu, else: ExMLX.default_device())]
      a = ExMLX.iota(ta, {2, 1, 3}, on)
      b = ExMLX.iota(tb, {4, 1}, on)
      # the synchronous path: MLX's own answer
      expected =
        try do
          ExMLX.Op.run(op, [a.ref, b.ref], []) |> ExMLX.Tensor.wrap()
        rescue
          e in ExMLX.Error -> e
        end

      got =
        try do
          apply(ExMLX, op, [a, b]) |> ExMLX.eval()
        rescue
          e in ExMLX.Error -> e
        end

      case expected do
        %ExMLX.Error{message: message} ->
          assert %ExMLX.Error{message: ^message} = got

        %ExMLX.Tensor{} ->
          assert {got.shape, got.type} == {{2, 4, 3}, expected.type}, "#{op} #{inspect({ta, tb})}"
          assert ExMLX.to_binary(got) == ExMLX.to_binary(expected)
      end
    end
  end

  test "every unary op and type: the prediction is what MLX produces, values included" do
    for op <- ExMLX.unary_ops(), t <- types() do
      on = [device: if(t == {:f, 64}, do: :cpu, else: ExMLX.default_device())]
      a = ExMLX.iota(t, {2, 3}, on)
      label = "#{op} #{inspect(t)}"

      # the synchronous path: the call's own answer or error, then its values
      expected =
        try do
          ExMLX.Op.run(op, [a.ref], []) |> ExMLX.Tensor.wrap()
        rescue
          e in ExMLX.Error -> e
        end

      case expected do
        %ExMLX.Error{} -> assert Prediction.unary(op, a) == :unknown, label
        %ExMLX.Tensor{} -> assert Prediction.unary(op, a) == {:ok, {2, 3}, expected.type}, label
      end

      assert outcome(fn -> apply(ExMLX, op, [a]) end) ==
               outcome(fn -> if is_exception(expected), do: raise(expected), else: expected end),
             label
    end
  end

  test "reductions: every op, type and choice of axes, the prediction is what the op gives" do
    params = fn op ->
      cond do
        op in [:argmax, :argmin] ->
          for axis <- [nil, 0, 1, -1, 2, -3], keep <- [false, true], do: [axis, keep]

        op in [:cumulative_sum, :cumulative_product, :cumulative_min, :cumulative_max] ->
          for axis <- [0, 1, -1, -2, 2], reverse <- [false, true], do: [axis, reverse]

        true ->
          for axes <- [nil, [], [0], [1], [-1], [0, 1], [1, 0], [0, 0], [2], [-3]],
              keep <- [false, true],
              do: [axes, keep]
      end
    end

    for op <- Prediction.reductions(),
        t <- types(),
        shape <- [{2, 3}, {0, 3}],
        ps <- params.(op) do
      on = [device: if(t == {:f, 64}, do: :cpu, else: ExMLX.default_device())]
      a = ExMLX.iota(t, shape, on)
      label = inspect({op, t, shape, ps})

      # the synchronous path: the call's own answer or error, then its values
      expected =
        try do
          ExMLX.Op.run(op, [a.ref], ps) |> ExMLX.Tensor.wrap()
        rescue
          e in ExMLX.Error -> e
        end

      # a prediction may decline (the call then waits), never differ
      case {Prediction.reduce(op, a, ps), expected} do
        {:unknown, _} ->
          :ok

        {{:ok, s, t}, %ExMLX.Tensor{}} ->
          assert {s, t} == {expected.shape, expected.type}, label

        {prediction, e} ->
          flunk("#{label}: predicted #{inspect(prediction)}, the op: #{inspect(e)}")
      end

      # the function, as a user calls it
      [first, second] = ps

      call =
        case op do
          op when op in [:argmax, :argmin] ->
            fn -> apply(ExMLX, op, [a, [axis: first, keep_dims: second]]) end

          op when op in [:sum, :product, :all, :any, :mean, :reduce_min, :reduce_max] ->
            fn -> apply(ExMLX, op, [a, [axes: first, keep_dims: second]]) end

          _cumulative ->
            fn -> apply(ExMLX, op, [a, [axis: first, reverse: second]]) end
        end

      assert outcome(call) ==
               outcome(fn -> if is_exception(expected), do: raise(expected), else: expected end),
             label
    end
  end

  test "what reductions predict, and where they decline" do
    f32 = ExMLX.iota({:f, 32}, {2, 3})
    u8 = ExMLX.iota({:u, 8}, {2, 3})
    assert Prediction.reduce(:sum, f32, [[1], false]) == {:ok, {2}, {:f, 32}}
    assert Prediction.reduce(:sum, u8, [nil, true]) == {:ok, {1, 1}, {:u, 32}}
    assert Prediction.reduce(:mean, u8, [[-1], false]) == {:ok, {2}, {:f, 32}}
    assert Prediction.reduce(:argmax, f32, [nil, false]) == {:ok, {}, {:u, 32}}
    assert Prediction.reduce(:argmin, f32, [0, true]) == {:ok, {1, 3}, {:u, 32}}
    # (the cumulative ops keep the type: the op table's `same`)
    assert Prediction.reduce(:cumulative_sum, u8, [1, true]) == {:ok, {2, 3}, {:u, 8}}
    # reduced over no axis, out of range, repeated, of nothing: the call decides
    assert Prediction.reduce(:sum, u8, [[], false]) == :unknown
    assert Prediction.reduce(:sum, u8, [[2], false]) == :unknown
    assert Prediction.reduce(:sum, u8, [[0, -2], false]) == :unknown
    assert Prediction.reduce(:reduce_max, ExMLX.iota({:f, 32}, {0, 3}), [[1], false]) == :unknown
  end

  test "matmul: every type pair and shape pair, the prediction is what MLX produces" do
    shapes = [
      {{2, 3}, {3, 4}},
      {{5, 2, 3}, {3, 4}},
      {{2, 1, 2, 3}, {4, 3, 2}},
      {{0, 3}, {3, 2}},
      {{2, 3}, {4, 2}},
      {{3}, {3, 2}},
      {{2, 3}, {3}},
      {{2, 2, 3}, {3, 3, 1}}
    ]

    for ta <- types(), tb <- types(), {sa, sb} <- shapes do
      on = [device: if({:f, 64} in [ta, tb], do: :cpu, else: ExMLX.default_device())]
      a = ExMLX.iota(ta, sa, on)
      b = ExMLX.iota(tb, sb, on)

      # the synchronous path: the op's own answer, or its error
      expected =
        try do
          ExMLX.Op.run(:matmul, [a.ref, b.ref], []) |> ExMLX.Tensor.wrap()
        rescue
          e in ExMLX.Error -> e
        end

      case {Prediction.matmul(a, b), expected} do
        {:unknown, _} ->
          :ok

        {{:ok, shape, type}, %ExMLX.Tensor{} = t} ->
          assert {shape, type} == {t.shape, t.type}, inspect({ta, tb, sa, sb})
          got = ExMLX.matmul(a, b)
          assert {got.shape, got.type} == {shape, type}
          assert ExMLX.to_binary(got) == ExMLX.to_binary(t), inspect({ta, tb, sa, sb})

        {prediction, %ExMLX.Error{} = e} ->
          flunk(
            "#{inspect({ta, tb, sa, sb})}: predicted #{inspect(prediction)}, MLX: #{e.message}"
          )
      end
    end

    # what is predicted: MLX's own products of floating or complex operands
    f32 = ExMLX.iota({:f, 32}, {2, 3})
    assert Prediction.matmul(f32, ExMLX.iota({:s, 32}, {4, 3, 5})) == {:ok, {4, 2, 5}, {:f, 32}}

    assert Prediction.matmul(ExMLX.iota({:s, 32}, {2, 3}), ExMLX.iota({:s, 32}, {3, 2})) ==
             :unknown

    assert Prediction.matmul(f32, ExMLX.iota({:f, 32}, {3})) == :unknown
  end

  test "matmul returns while the worker is busy, and contracted sizes that differ raise at the call" do
    # (on the CPU, whose default worker the test hook holds)
    a = ExMLX.iota({:f, 32}, {2, 3}, device: :cpu) |> ExMLX.eval()
    b = ExMLX.iota({:f, 32}, {3, 2}, device: :cpu) |> ExMLX.eval()
    # (the first call reads MLX's type rules on the worker: done before the hold)
    assert ExMLX.to_list(ExMLX.matmul(a, b)) == [10.0, 13.0, 28.0, 40.0]
    hold = make_ref()
    :ok = ExMLX.Native.hold_worker_for_test(hold)

    product =
      try do
        ExMLX.matmul(a, b)
      after
        ExMLX.Native.release_worker_for_test()
      end

    assert_receive {^hold, {:ok, true}}, 120_000
    assert {product.shape, product.type} == {{2, 2}, {:f, 32}}
    # [[0, 1, 2], [3, 4, 5]] by [[0, 1], [2, 3], [4, 5]], by hand
    assert ExMLX.to_list(product) == [10.0, 13.0, 28.0, 40.0]

    assert_raise ExMLX.Error, ~r/contracted dimensions 3 and 2 differ/, fn ->
      ExMLX.matmul(a, a)
    end
  end

  test "creation ops: the prediction is the synchronous call's shape and type, or :unknown where it raises" do
    values = [
      0,
      1,
      -1,
      255,
      256,
      -129,
      2 ** 64,
      -(2 ** 63) - 1,
      1.5,
      2.0,
      :nan,
      :infinity,
      {1, 2},
      true
    ]

    shapes = [{}, {2, 3}, {0, 4}, {-1}, [2]]

    calls =
      for(t <- types(), v <- values, s <- shapes, do: {:full, [v, t, s, :cpu]}) ++
        for(
          t <- types(),
          s <- shapes,
          axis <- [nil, 0, 1, 2, -1],
          do: {:iota, [t, s, axis, :cpu]}
        ) ++
        for t <- types(),
            {n, m} <- [{3, nil}, {2, 4}, {0, 1}, {-1, 2}],
            do: {:eye, [n, t, m, :cpu]}

    predicted =
      for {op, params} <- calls do
        label = "#{op} #{inspect(params)}"

        expected =
          try do
            ExMLX.Op.run(op, [], params) |> ExMLX.Tensor.wrap()
          rescue
            e in ExMLX.Error -> e
          end

        prediction = Prediction.creation(op, params)
        got = outcome(fn -> apply(ExMLX, op, creation_args(op, params)) end)

        case expected do
          %ExMLX.Error{message: message} ->
            assert prediction == :unknown, label
            assert got == {:error, message}, label

          %ExMLX.Tensor{shape: shape, type: type} ->
            assert prediction in [:unknown, {:ok, shape, type}], label
            assert got == {shape, type, ExMLX.to_binary(expected)}, label
        end

        prediction != :unknown
      end

    # the plain calls are predicted: at least every type filled with 0 in the
    # three valid shapes, iota of those along no axis or a valid one (7 calls
    # a type), and the three valid eyes
    assert Enum.count(predicted, & &1) >= 14 * 3 + 14 * 7 + 14 * 3
  end

  test "a predicted creation op returns while the worker is busy" do
    # (on the CPU, whose default worker the test hook holds; the type rules
    # are not read for creation ops)
    hold = make_ref()
    :ok = ExMLX.Native.hold_worker_for_test(hold)

    made =
      try do
        {ExMLX.full(7, {:s, 16}, {2}, device: :cpu), ExMLX.iota({:f, 32}, {3}, device: :cpu),
         ExMLX.eye(2, {:u, 8}, device: :cpu)}
      after
        ExMLX.Native.release_worker_for_test()
      end

    assert_receive {^hold, {:ok, true}}, 120_000
    {full, iota, eye} = made
    assert ExMLX.to_list(full) == [7, 7]
    assert ExMLX.to_list(iota) == [0.0, 1.0, 2.0]
    assert ExMLX.to_list(eye) == [1, 0, 0, 1]
  end

  # The public function's arguments for a creation op's table parameters.
  defp creation_args(:full, [v, t, s, device]), do: [v, t, s, [device: device]]
  defp creation_args(:iota, [t, s, axis, device]), do: [t, s, [axis: axis, device: device]]
  defp creation_args(:eye, [n, t, m, device]), do: [n, t, [m: m, device: device]]

  test "a wrong prediction is an :internal error, never a silent cast" do
    a = ExMLX.iota({:s, 32}, {3})

    {ref, _} = ExMLX.Op.defer_exact(:add, [a.ref, a.ref], [], {:f, 32}, {3})
    error = assert_raise ExMLX.Error, fn -> Call.info(ref) end
    assert error.kind == :internal

    assert error.message ==
             "ExMLX predicted shape {3} and type {:f, 32}, MLX produced shape {3} and type {:s, 32}"

    {ref, _} = ExMLX.Op.defer_exact(:add, [a.ref, a.ref], [], {:s, 32}, {4})

    assert_raise ExMLX.Error,
                 ~r/predicted shape \{4\} and type \{:s, 32\}, MLX produced shape \{3\}/,
                 fn -> Call.info(ref) end
  end

  test "shapes that do not broadcast raise MLX's error at the call" do
    a = ExMLX.iota({:f, 32}, {3})
    b = ExMLX.iota({:f, 32}, {4})
    assert_raise ExMLX.Error, ~r/cannot be broadcast/, fn -> ExMLX.add(a, b) end
  end

  test "a 1000-add chain returns at once and evaluates to the right value" do
    one = ExMLX.full(1, {:s, 64}, {})
    sum = Enum.reduce(1..1000, one, fn _, acc -> ExMLX.add(acc, one) end)
    assert {sum.shape, sum.type} == {{}, {:s, 64}}
    assert ExMLX.item(sum) == 1001
  end
end
