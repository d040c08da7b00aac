defmodule ExMLX.FFTTest do
  # ExMLX.FFT against numpy.fft: every case's input is written to a temporary
  # folder as raw bytes, test/support/numpy_fft.py computes numpy's result
  # from the same values (in float64 / complex128), and ours must match it
  # within single-precision rounding; shifts must match bit for bit.
  use ExUnit.Case, async: true
  doctest ExMLX.FFT
  import ExMLX.TestHelpers, only: [device_for: 1]

  alias ExMLX.FFT

  @script Path.expand("../support/numpy_fft.py", __DIR__)

  # float32's machine epsilon
  @eps32 :math.pow(2, -23)

  # -- inputs --------------------------------------------------------------------

  # Pseudo-random values from a fixed seed, exactly representable in the type:
  # floats in [-1, 1) rounded to f32, integers in -5..5.
  defp input(type, shape, seed) do
    :rand.seed(:exsss, {seed, 7, 11})

    binary =
      for _ <- 1..count(shape)//1, into: <<>> do
        case type do
          {:f, 32} ->
            <<2 * :rand.uniform() - 1::32-float-little>>

          {:f, 64} ->
            <<2 * :rand.uniform() - 1::64-float-little>>

          {:c, 64} ->
            <<2 * :rand.uniform() - 1::32-float-little, 2 * :rand.uniform() - 1::32-float-little>>

          {:s, 32} ->
            <<:rand.uniform(11) - 6::32-signed-little>>
        end
      end

    ExMLX.from_binary(binary, type, shape, device: device_for(type))
  end

  defp numpy_type({:f, 32}), do: "f4"
  defp numpy_type({:f, 64}), do: "f8"
  defp numpy_type({:c, 64}), do: "c8"
  defp numpy_type({:s, 32}), do: "i4"

  # A Python literal for an option value.
  defp python(nil), do: "None"
  defp python(list) when is_list(list), do: "[" <> Enum.map_join(list, ", ", &python/1) <> "]"
  defp python(n) when is_integer(n), do: Integer.to_string(n)

  # -- numpy's results -------------------------------------------------------------

  # Runs numpy on `cases` ({function, tensor, numpy keyword arguments}) and
  # returns {dtype, shape, binary} for each, in order.
  defp numpy(dir, cases) do
    manifest =
      cases
      |> Enum.with_index()
      |> Enum.map_join(fn {{fun, t, kwargs}, i} ->
        File.write!(Path.join(dir, "#{i}.in"), ExMLX.to_binary(t))
        shape = t.shape |> Tuple.to_list() |> Enum.join(",")
        dict = "{" <> Enum.map_join(kwargs, ", ", fn {k, v} -> "'#{k}': #{python(v)}" end) <> "}"
        Enum.join([i, fun, numpy_type(t.type), shape, dict], "\t") <> "\n"
      end)

    File.write!(Path.join(dir, "cases"), manifest)
    {out, status} = ExMLX.TestHelpers.python(@script, [dir])
    assert status == 0, out

    lines = String.split(out, "\n", trim: true)
    assert length(lines) == length(cases), out

    for {line, i} <- Enum.with_index(lines) do
      [id, dtype, shape] =
        String.split(line, "\t") ++ if String.ends_with?(line, "\t"), do: [""], else: []

      assert id == Integer.to_string(i)
      shape = shape |> String.split(",", trim: true) |> Enum.map(&String.to_integer/1)
      {dtype, List.to_tuple(shape), File.read!(Path.join(dir, "#{i}.out"))}
    end
  end

  # Numbers from raw little-endian bytes, complex ones as {re, im}.
  defp decode(binary, "c16"),
    do: for(<<re::64-float-little, im::64-float-little <- binary>>, do: {re, im})

  defp decode(binary, "f8"), do: for(<<x::64-float-little <- binary>>, do: {x, 0.0})

  defp decode(binary, {:c, 64}),
    do: for(<<re::32-float-little, im::32-float-little <- binary>>, do: {re, im})

  defp decode(binary, {:f, 32}), do: for(<<x::32-float-little <- binary>>, do: {x, 0.0})

  defp count(shape), do: shape |> Tuple.to_list() |> Enum.product()

  defp magnitude({re, im}), do: :math.sqrt(re * re + im * im)

  # Checks each case ({function, tensor, our options, numpy's extra options})
  # against numpy. A transform computed in single precision is off from the
  # exact one by about eps32 * log2(points) relative to the result's size;
  # the bound allows 8 times that.
  defp check_transforms(dir, cases) do
    expected = numpy(dir, for({fun, t, opts, extra} <- cases, do: {fun, t, opts ++ extra}))

    for {{fun, t, opts, _}, {dtype, shape, binary}} <- Enum.zip(cases, expected) do
      label = "#{fun}(#{inspect(t.type)}#{inspect(t.shape)}, #{inspect(opts)})"
      ours = apply(FFT, fun, [t, opts])
      assert ours.shape == shape, label
      assert ours.type == if(dtype == "c16", do: {:c, 64}, else: {:f, 32}), label

      want = decode(binary, dtype)
      got = decode(ExMLX.to_binary(ours), ours.type)
      scale = want |> Enum.map(&magnitude/1) |> Enum.max(fn -> 0.0 end) |> max(1.0)
      points = max(count(t.shape), count(shape))
      bound = 8 * @eps32 * :math.log2(points + 1) * scale

      error =
        Enum.zip_with(got, want, fn {a, b}, {c, d} -> magnitude({a - c, b - d}) end)
        |> Enum.max(fn -> 0.0 end)

      assert error <= bound, "#{label}: largest error #{error}, bound #{bound}"
    end
  end

  defp f32(shape, seed \\ 1), do: input({:f, 32}, shape, seed)
  defp c64(shape, seed \\ 2), do: input({:c, 64}, shape, seed)

  # -- transforms ------------------------------------------------------------------

  describe "1-D transforms match numpy.fft" do
    @describetag :tmp_dir

    test "fft and ifft: odd and even lengths, n, axis, types", %{tmp_dir: dir} do
      check_transforms(dir, [
        {:fft, f32({8}), [], []},
        {:fft, f32({7}), [], []},
        {:fft, c64({6}), [], []},
        {:fft, input({:s, 32}, {5}, 3), [], []},
        # padding and truncation
        {:fft, f32({7}), [n: 10], []},
        {:fft, f32({8}), [n: 5], []},
        {:fft, f32({8}), [n: 1], []},
        # non-default axes, ranks 2 and 3
        {:fft, f32({5, 4}), [axis: 0], []},
        {:fft, c64({3, 4, 5}), [axis: -2], []},
        {:fft, f32({3, 4, 5}), [axis: 0, n: 6], []},
        {:ifft, c64({7}), [], []},
        {:ifft, c64({8}), [n: 11], []},
        {:ifft, f32({9}), [n: 4], []},
        {:ifft, c64({2, 3, 4}), [axis: 1], []},
        {:ifft, c64({4, 5}), [axis: 0, n: 3], []}
      ])
    end

    test "rfft and irfft: odd n, padding, truncation, axis", %{tmp_dir: dir} do
      check_transforms(dir, [
        {:rfft, f32({8}), [], []},
        {:rfft, f32({7}), [], []},
        {:rfft, input({:s, 32}, {6}, 4), [], []},
        {:rfft, f32({7}), [n: 9], []},
        {:rfft, f32({8}), [n: 5], []},
        {:rfft, f32({5, 6}), [axis: 0], []},
        {:rfft, f32({2, 5, 3}), [axis: 1, n: 8], []},
        # irfft's default n is 2 * (m - 1)
        {:irfft, c64({5}), [], []},
        {:irfft, c64({4}), [], []},
        # odd n, and n needing a padded (12 -> 7 bins) or cropped (4 -> 3) input
        {:irfft, c64({4}), [n: 7], []},
        {:irfft, c64({4}), [n: 12], []},
        {:irfft, c64({6}), [n: 4], []},
        {:irfft, c64({6}), [n: 1], []},
        {:irfft, c64({5, 3}), [axis: 0], []},
        {:irfft, c64({2, 4, 3}), [axis: 1, n: 5], []},
        # a real input is taken as complex with zero imaginary parts
        {:irfft, f32({5}), [], []}
      ])
    end
  end

  describe "2-D transforms match numpy.fft" do
    @describetag :tmp_dir

    test "fft2 and ifft2", %{tmp_dir: dir} do
      check_transforms(dir, [
        {:fft2, f32({4, 5}), [], []},
        {:fft2, c64({3, 4, 5}), [], []},
        {:fft2, f32({3, 4, 5}), [axes: [0, 2]], []},
        {:fft2, f32({4, 5}), [s: [3, 7]], []},
        {:fft2, f32({2, 4, 5}), [s: [6, 2], axes: [2, 0]], []},
        {:ifft2, c64({5, 3}), [], []},
        {:ifft2, c64({5, 3}), [s: [2, 6]], []},
        {:ifft2, c64({2, 3, 4}), [axes: [-1, 0]], []}
      ])
    end

    test "rfft2 and irfft2: the last axis given is the halved one", %{tmp_dir: dir} do
      check_transforms(dir, [
        {:rfft2, f32({4, 5}), [], []},
        {:rfft2, f32({5, 4}), [axes: [1, 0]], []},
        {:rfft2, f32({3, 4, 5}), [s: [2, 7]], []},
        {:rfft2, f32({3, 4, 5}), [axes: [0, 2], s: [4, 3]], []},
        {:irfft2, c64({4, 5}), [], []},
        {:irfft2, c64({4, 5}), [s: [4, 7]], []},
        {:irfft2, c64({4, 5}), [s: [3, 4]], []},
        {:irfft2, c64({3, 4, 5}), [axes: [0, 1]], []},
        {:irfft2, c64({4, 3}), [axes: [1, 0], s: [5, 5]], []}
      ])
    end
  end

  describe "N-D transforms match numpy.fft" do
    @describetag :tmp_dir

    test "fftn and ifftn: ranks 1 to 3, s, axes", %{tmp_dir: dir} do
      check_transforms(dir, [
        {:fftn, f32({7}), [], []},
        {:fftn, f32({4, 5}), [], []},
        {:fftn, c64({3, 4, 5}), [], []},
        {:fftn, f32({3, 4, 5}), [axes: [0, 2]], []},
        {:fftn, f32({3, 4, 5}), [axes: [1]], []},
        # s alone transforms the last length(s) axes (numpy 2 wants the axes given)
        {:fftn, f32({3, 4, 5}), [s: [3, 6]], [axes: [1, 2]]},
        {:fftn, f32({3, 4, 5}), [s: [2, 5, 7], axes: [2, 0, 1]], []},
        {:ifftn, c64({3, 4, 5}), [], []},
        {:ifftn, c64({4, 5}), [s: [5, 3]], [axes: [0, 1]]},
        {:ifftn, c64({2, 3, 4}), [axes: [2, 0], s: [3, 3]], []}
      ])
    end

    test "rfftn and irfftn: odd lengths, s, axes", %{tmp_dir: dir} do
      check_transforms(dir, [
        {:rfftn, f32({9}), [], []},
        {:rfftn, f32({3, 4, 5}), [], []},
        {:rfftn, f32({3, 4, 5}), [axes: [2, 0]], []},
        {:rfftn, f32({3, 4, 5}), [s: [5, 3]], [axes: [1, 2]]},
        {:irfftn, c64({3, 4, 5}), [], []},
        {:irfftn, c64({3, 4, 5}), [s: [3, 4, 9]], [axes: [0, 1, 2]]},
        {:irfftn, c64({3, 4, 5}), [axes: [0, 1]], []},
        {:irfftn, c64({4, 3}), [s: [7]], [axes: [1]]},
        {:irfftn, c64({2, 3, 4}), [axes: [2, 1], s: [2, 5]], []}
      ])
    end

    test "inverse transforms undo forward ones" do
      x = f32({3, 4, 5})
      back = x |> FFT.rfftn() |> FFT.irfftn(s: [3, 4, 5])
      assert_close(ExMLX.to_list(back), ExMLX.to_list(x))

      back = x |> FFT.fft(axis: 1) |> FFT.ifft(axis: 1) |> ExMLX.real()
      assert_close(ExMLX.to_list(back), ExMLX.to_list(x))
    end
  end

  defp assert_close(got, want) do
    for {a, b} <- Enum.zip(got, want), do: assert(abs(a - b) <= 1.0e-6, "#{a} vs #{b}")
    assert length(got) == length(want)
  end

  # -- shifts --------------------------------------------------------------------

  describe "fftshift and ifftshift match numpy.fft bit for bit" do
    @describetag :tmp_dir

    test "odd and even lengths, chosen axes, any type", %{tmp_dir: dir} do
      cases =
        for fun <- [:fftshift, :ifftshift],
            {t, opts} <- [
              {input({:s, 32}, {6}, 5), []},
              {input({:s, 32}, {7}, 5), []},
              {f32({4, 5}), []},
              {f32({4, 5}), [axes: [0]]},
              {f32({4, 5}), [axes: [-1]]},
              {c64({3, 4, 5}), [axes: [0, 2]]},
              {input({:f, 64}, {5, 2, 3}, 6), []},
              {input({:f, 64}, {5, 2, 3}, 6), [axes: [2, 0, 1]]}
            ],
            do: {fun, t, opts}

      expected = numpy(dir, cases)

      for {{fun, t, opts}, {dtype, shape, binary}} <- Enum.zip(cases, expected) do
        ours = apply(FFT, fun, [t, opts])
        label = "#{fun}(#{inspect(t.type)}#{inspect(t.shape)}, #{inspect(opts)})"
        assert {ours.shape, ours.type} == {shape, t.type}, label
        assert dtype == numpy_type(t.type), label
        assert ExMLX.to_binary(ours) == binary, label
      end
    end

    test "a rank-0 tensor has no axis to shift" do
      t = ExMLX.full(3, {:s, 32}, {})
      assert FFT.fftshift(t) |> ExMLX.item() == 3
      assert FFT.ifftshift(t) |> ExMLX.item() == 3
    end
  end

  # -- types and errors --------------------------------------------------------------

  defp mlx_error(kind, message, fun) do
    error = assert_raise ExMLX.Error, fun
    assert {error.kind, error.message} == {kind, message}
  end

  # ExMLX's older `op` with `old_opts` gives ExMLX.FFT's `op` with `opts`, bit
  # for bit.
  defp delegates(op, t, old_opts, opts) do
    assert apply(ExMLX, op, [t, old_opts]) |> ExMLX.to_binary() ==
             apply(FFT, op, [t, opts]) |> ExMLX.to_binary()
  end

  @transforms [:fft, :ifft, :rfft, :irfft, :fft2, :ifft2, :rfft2, :irfft2] ++
                [:fftn, :ifftn, :rfftn, :irfftn]

  describe "types" do
    test "f64 input raises instead of being narrowed to complex64" do
      t = ExMLX.iota({:f, 64}, {4, 4}, device: :cpu)

      for fun <- @transforms do
        mlx_error(
          :type,
          "#{fun}: {:f, 64} input is not supported: MLX computes Fourier transforms in " <>
            "complex64 (it has no complex128), which would narrow it; convert it to {:f, 32} first",
          fn -> apply(FFT, fun, [t]) end
        )
      end

      # in single precision it works
      assert FFT.fft(ExMLX.as_type(t, {:f, 32})).type == {:c, 64}
    end

    test "the real transforms refuse complex input instead of dropping its imaginary part" do
      t = c64({4, 4})

      for {fun, complex_fun} <- [rfft: :fft, rfft2: :fft2, rfftn: :fftn] do
        mlx_error(
          :type,
          "#{fun}: takes real input, got {:c, 64}; use #{complex_fun} for complex input",
          fn -> apply(FFT, fun, [t]) end
        )
      end
    end

    test "real inputs of every other type are promoted" do
      # fft([1, 0, 1, 0]) = [2, 0, 2, 0]
      for type <- [:bool, {:u, 8}, {:s, 64}, {:f, 16}, {:bf, 16}, {:f, 32}] do
        t = ExMLX.from_binary(<<1, 0, 1, 0>>, {:u, 8}, {4}) |> ExMLX.as_type(type)
        assert FFT.fft(t) |> ExMLX.to_list() == [{2.0, 0.0}, {0.0, 0.0}, {2.0, 0.0}, {0.0, 0.0}]
        assert FFT.rfft(t).type == {:c, 64}
        assert FFT.irfft(t).type == {:f, 32}
      end
    end
  end

  describe "bad arguments" do
    test "axes out of range, repeated, or of the wrong count" do
      v = f32({4})
      m = f32({2, 3})

      mlx_error(:argument, "axis: axis 1 is out of range for a tensor of rank 1", fn ->
        FFT.fft(v, axis: 1)
      end)

      mlx_error(:argument, "axis: axis -3 is out of range for a tensor of rank 2", fn ->
        FFT.irfft(m, axis: -3)
      end)

      mlx_error(:argument, "axes: axis -2 is out of range for a tensor of rank 1", fn ->
        FFT.fft2(v)
      end)

      mlx_error(:argument, "axes: axis -1 appears twice", fn -> FFT.fftn(m, axes: [1, -1]) end)
      mlx_error(:argument, "axes: axis 0 appears twice", fn -> FFT.ifft2(m, axes: [0, 0]) end)
      mlx_error(:argument, "axes: needs at least one axis", fn -> FFT.rfftn(m, axes: []) end)

      mlx_error(
        :argument,
        "axes: rfft2 transforms exactly two axes, got 1 (use rfftn for any number)",
        fn -> FFT.rfft2(m, axes: [0]) end
      )

      mlx_error(:argument, "axes: axis 2 is out of range for a tensor of rank 2", fn ->
        FFT.fftshift(m, axes: [2])
      end)

      mlx_error(:argument, "axes: axis 1 appears twice", fn ->
        FFT.ifftshift(m, axes: [1, 1])
      end)
    end

    test "lengths: one per axis, at least one point" do
      m = f32({2, 3})

      mlx_error(:argument, "s: has 2 lengths for 1 axis; give one length per axis", fn ->
        FFT.fftn(m, s: [2, 2], axes: [0])
      end)

      mlx_error(:argument, "s: has 1 length for 2 axes; give one length per axis", fn ->
        FFT.fft2(m, s: [4])
      end)

      mlx_error(:argument, "s: has 3 lengths, more than the tensor's 2 axes", fn ->
        FFT.ifftn(m, s: [1, 2, 3])
      end)

      mlx_error(
        :argument,
        "n: the default output length 2 * (m - 1) is 0 for axis 0 of size 1; give the length",
        fn -> FFT.irfft(c64({1})) end
      )

      mlx_error(
        :argument,
        "s: the default output length 2 * (m - 1) is 0 for axis 1 of size 1; give the length",
        fn -> FFT.irfft2(c64({3, 1})) end
      )

      empty = ExMLX.from_binary(<<>>, {:f, 32}, {2, 0})

      mlx_error(
        :argument,
        "n: axis 1 has size 0 and a transform needs at least one point; give a length to zero-pad it",
        fn -> FFT.fft(empty) end
      )

      # with a length, the empty axis is zero-padded: the transform of zeros
      assert FFT.fft(empty, n: 2) |> ExMLX.to_list() == List.duplicate({0.0, 0.0}, 4)

      mlx_error(:argument, "tensor: fftn needs a tensor of rank 1 or more, got a scalar", fn ->
        FFT.fftn(ExMLX.full(1.0, {:f, 32}, {}))
      end)
    end

    test "option values of the wrong kind raise ArgumentError" do
      v = f32({4})

      assert_raise ArgumentError, "expected :n to be a positive integer or nil, got: 0", fn ->
        FFT.fft(v, n: 0)
      end

      assert_raise ArgumentError, "expected :n to be a positive integer or nil, got: -3", fn ->
        FFT.irfft(v, n: -3)
      end

      assert_raise ArgumentError, "expected :n to be a positive integer or nil, got: 2.0", fn ->
        FFT.rfft(v, n: 2.0)
      end

      assert_raise ArgumentError, "expected :axis to be an integer, got: nil", fn ->
        FFT.ifft(v, axis: nil)
      end

      assert_raise ArgumentError,
                   "expected :s to be a list of positive integers or nil, got: [4, 0]",
                   fn -> FFT.fft2(v, s: [4, 0]) end

      assert_raise ArgumentError,
                   "expected :s to be a list of positive integers or nil, got: 4",
                   fn -> FFT.rfftn(v, s: 4) end

      assert_raise ArgumentError, "expected :axes to be a list of integers or nil, got: -1", fn ->
        FFT.fftn(v, axes: -1)
      end

      assert_raise ArgumentError,
                   "expected :axes to be a list of integers or nil, got: [0 | 1]",
                   fn -> FFT.fftshift(v, axes: [0 | 1]) end

      # unknown options: Keyword.validate!/2's error
      assert_raise ArgumentError, ~r/unknown keys \[:length\]/, fn -> FFT.fft(v, length: 4) end
      assert_raise ArgumentError, ~r/unknown keys \[:axis\]/, fn -> FFT.fft2(v, axis: 0) end
      assert_raise ArgumentError, ~r/unknown keys \[:n\]/, fn -> FFT.fftshift(v, n: 2) end
    end
  end

  describe "ExMLX's older FFT functions" do
    test "delegate to ExMLX.FFT with :length and :lengths" do
      for op <- [:fft, :ifft, :rfft] do
        delegates(op, f32({6}), [length: 8, axis: 0], n: 8, axis: 0)
      end

      delegates(:irfft, c64({4}), [length: 5], n: 5)

      for op <- [:fft2, :ifft2] do
        delegates(op, f32({3, 4}), [lengths: [2, 5], axes: [1, 0]], s: [2, 5], axes: [1, 0])
      end
    end
  end
end
