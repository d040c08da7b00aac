if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.FusedKernelsTest do
    # ExMLX.Compiler with `fuse: true` records the composed forms of RMS
    # normalization, softmax, attention and rotary embedding as MLX's fused kernels
    # (ExMLX.Compiler.FusedKernels): the programs' ops, and their values
    # against the formulas computed here and against the unfused programs.
    use ExUnit.Case, async: true

    defmodule Funs do
      import Nx.Defn

      # Bumblebee's `rms_norm` layer (`upcast: :normalization`)
      defn rms_norm(x, w) do
        x |> Nx.as_type(:f32) |> normalize() |> Nx.as_type(Nx.type(x)) |> Nx.multiply(w)
      end

      defnp normalize(x) do
        variance = x |> Nx.pow(2) |> Nx.mean(axes: [-1], keep_axes: true)
        x * Nx.rsqrt(variance + 1.0e-6)
      end

      # Axon's `softmax` activation
      defn softmax(x) do
        max = stop_grad(Nx.reduce_max(x, axes: [-1], keep_axes: true))
        e = Nx.exp(x - max)
        Nx.multiply(1 / Nx.sum(e, axes: [-1], keep_axes: true), e)
      end

      # Bumblebee's attention weights and output (layers.ex), with the
      # softmax over `softmax_axis` (3 in Bumblebee)
      defn attention(q, k, v, mask, opts \\ []) do
        opts = keyword!(opts, softmax_axis: 3)
        qt = Nx.transpose(q, axes: [0, 2, 1, 3])
        kt = Nx.transpose(k, axes: [0, 2, 1, 3])
        weights = Nx.dot(qt, [3], [0, 1], kt, [3], [0, 1])
        weights = weights * (1 / Nx.as_type(Nx.sqrt(Nx.axis_size(q, -1)), Nx.type(q)))
        min = Nx.Constants.min_finite(Nx.type(q))
        bias = Nx.select(mask, Nx.tensor(0.0, type: Nx.type(q)), min)

        weights = weights + bias
        axes = [opts[:softmax_axis]]
        max = stop_grad(Nx.reduce_max(weights, axes: axes, keep_axes: true))
        e = Nx.exp(weights - max)
        p = Nx.multiply(1 / Nx.sum(e, axes: axes, keep_axes: true), e)
        vt = Nx.transpose(v, axes: [0, 2, 1, 3])
        Nx.dot(p, [3], [0, 1], vt, [2], [0, 1]) |> Nx.transpose(axes: [0, 2, 1, 3])
      end

      # Bumblebee's rotary embedding (its default frequencies): the cos and
      # sin tables of `positions` positions, the rows `position_ids` of each
      # `attention` as a decoding loop's step computes it: in a while
      # loop's body (one step), where the host knows the mask
      defn attention_in_loop(q, k, v, mask) do
        out = Nx.broadcast(Nx.tensor(0, type: Nx.type(q)), attention_shape(q, v))

        {_q, _k, _v, _mask, out, _i} =
          while {q, k, v, mask, _out = out, i = 0}, i < 1 do
            {q, k, v, mask, attention(q, k, v, mask), i + 1}
          end

        out
      end

      deftransformp attention_shape(q, v) do
        {batch, queries, heads, _} = Nx.shape(q)
        {batch, queries, heads, elem(Nx.shape(v), 3)}
      end

      defn rotary(x, position_ids, opts \\ []) do
        opts = keyword!(opts, positions: 8)
        d = Nx.axis_size(x, -1)
        range = Nx.iota({div(d, 2)}) |> Nx.multiply(2) |> Nx.divide(d)
        inv_frequency = 1.0 / Nx.pow(10_000, range)
        angle = Nx.outer(Nx.iota({opts[:positions]}), inv_frequency)
        angle = Nx.concatenate([angle, angle], axis: -1)
        ids = Nx.as_type(position_ids, :s64)
        cos = angle |> Nx.cos() |> Nx.take(ids) |> Nx.new_axis(2) |> Nx.as_type(Nx.type(x))
        sin = angle |> Nx.sin() |> Nx.take(ids) |> Nx.new_axis(2) |> Nx.as_type(Nx.type(x))
        x * cos + rotate_half(x) * sin
      end

      defnp rotate_half(x) do
        half = div(Nx.axis_size(x, -1), 2)
        x1 = x[[.., .., .., 0..(half - 1)//1]]
        x2 = x[[.., .., .., half..-1//1]]
        Nx.concatenate([-x2, x1], axis: -1)
      end

      # the last position's logits, as Bumblebee's generation reads them
      defn(last_logits(hidden, kernel), do: Nx.dot(hidden, kernel)[[.., -1]])

      # a slice of the vocabulary: it needs the whole product
      defn(some_logits(hidden, kernel), do: Nx.dot(hidden, kernel)[[.., .., 0..1]])

      # the mean over the first axis: not RMS normalization
      defn column_norm(x, w) do
        variance = x |> Nx.pow(2) |> Nx.mean(axes: [0], keep_axes: true)
        x * Nx.rsqrt(variance + 1.0e-6) * w
      end
    end

    # `fun` on `args` compiled with `opts`: the result, and the names of
    # the ops of the program it ran (`fun` a closure of its own for each
    # output type and `:fuse`: the compiler's cache keys programs by it)
    defp run(fun, args, opts) do
      jit_opts = Keyword.merge([compiler: ExMLX.Compiler, device: :cpu], opts)
      result = apply(Nx.Defn.jit(fun, jit_opts), args)

      fuse = Keyword.get(opts, :fuse, false)
      types = [ExMLX.Backend.storage_type(result.type)]

      [program] =
        for {{^fun, _device, ^fuse, _templates, _hooked},
             {:program, %{program: p, types: ^types}}} <-
              ExMLX.ProgramCache.entries(),
            do: p

      {_device, _inputs, _constants, instructions, _outputs} = ExMLX.ProgramCache.spec(program)
      {result, op_names(instructions)}
    end

    # The ops of a program's instructions, a loop's condition and body
    # after its `:while`
    defp op_names(instructions) do
      Enum.flat_map(instructions, fn
        {:while, _initial, {condition, _}, {body, _}} ->
          [:while | op_names(condition) ++ op_names(body)]

        instruction ->
          [elem(instruction, 0)]
      end)
    end

    defp values(n, scale), do: for(i <- 1..n, do: :math.sin(i * 0.7) * scale)

    # x / sqrt(mean(x²) + 1e-6) · w along each row of `rows`
    defp rms_norm_rows(rows, w) do
      for row <- rows do
        r = 1 / :math.sqrt(Enum.sum(Enum.map(row, &(&1 * &1))) / length(row) + 1.0e-6)
        row |> Enum.zip(w) |> Enum.map(fn {v, k} -> v * r * k end)
      end
    end

    defp assert_close(tensor, expected, rtol) do
      got = Nx.to_flat_list(tensor)
      ExMLX.TestHelpers.assert_close(got, List.flatten(expected), rtol, "values")
    end

    # Funs.rms_norm on `count` rows of `width` values of `type`: with
    # `fuse: true` one rms_norm op, within `rtol` of the formula on the
    # values as stored and of the unfused program
    defp check_rms_norm(type, count, width, rtol) do
      x = Nx.tensor(Enum.chunk_every(values(count * width, 3.0), width), type: type)
      w = Nx.tensor(values(width, 1.5), type: type)
      [x, w] = Enum.map([x, w], &Nx.backend_transfer(&1, ExMLX.Backend))
      stored = Enum.chunk_every(Nx.to_flat_list(x), width)
      expected = rms_norm_rows(stored, Nx.to_flat_list(w))

      {got, ops} = run(fn x, w -> Funs.rms_norm(x, w) end, [x, w], fuse: true)
      assert ops == [:rms_norm]
      assert got.type == type
      assert_close(got, expected, rtol)

      {unfused, plain_ops} = run(fn x, w -> Funs.rms_norm(x, w) end, [x, w], [])
      assert :rms_norm not in plain_ops and :rsqrt in plain_ops
      assert_close(got, Nx.to_flat_list(unfused), rtol)
    end

    test "RMS normalization in float32 is one rms_norm op with fuse: true" do
      check_rms_norm({:f, 32}, 6, 16, 1.0e-6)
    end

    test "RMS normalization of bfloat16 computed in float32 is one rms_norm op" do
      # normalized in float32, rounded to bfloat16, scaled and rounded again
      check_rms_norm({:bf, 16}, 4, 64, 2 * 2 ** -8)
    end

    test "softmax is one softmax op with fuse: true" do
      rows = Enum.chunk_every(values(3 * 10, 4.0), 10)
      x = Nx.tensor(rows, type: :f32, backend: ExMLX.Backend)

      expected =
        for row <- rows do
          m = Enum.max(row)
          e = Enum.map(row, &:math.exp(&1 - m))
          Enum.map(e, &(&1 / Enum.sum(e)))
        end

      fused = fn x -> Funs.softmax(x) end
      {got, ops} = run(fused, [x], fuse: true)
      assert ops == [:softmax]
      assert_close(got, expected, 1.0e-6)

      plain = fn x -> Funs.softmax(x) end
      {unfused, plain_ops} = run(plain, [x], [])
      assert :softmax not in plain_ops and :exp in plain_ops
      assert_close(got, Nx.to_flat_list(unfused), 1.0e-6)
    end

    # Attention computed here: for batch b, query i and head h,
    # softmax_j(q·k_j / sqrt(d) + bias) · v_j, bias 0 where `allowed.(i, j)`
    # and -∞ elsewhere; q, k, v as lists `[b][position][head][depth]`.
    defp attention_formula(q, k, v, allowed) do
      for {qb, kb, vb} <- Enum.zip([q, k, v]) do
        for {qi, i} <- Enum.with_index(qb) do
          for h <- 0..(length(qi) - 1) do
            qh = Enum.at(qi, h)
            scale = 1 / :math.sqrt(length(qh))

            scores =
              for {kj, j} <- Enum.with_index(kb), allowed.(i, j) do
                {j, scale * Enum.sum(Enum.zip_with(qh, Enum.at(kj, h), &(&1 * &2)))}
              end

            m = scores |> Enum.map(&elem(&1, 1)) |> Enum.max()
            e = Enum.map(scores, fn {j, s} -> {j, :math.exp(s - m)} end)
            total = e |> Enum.map(&elem(&1, 1)) |> Enum.sum()

            for d <- 0..(length(qh) - 1) do
              Enum.sum(for {j, w} <- e, do: w / total * Enum.at(Enum.at(Enum.at(vb, j), h), d))
            end
          end
        end
      end
    end

    defp to_lists(t), do: t |> Nx.as_type(:f32) |> Nx.to_list()

    # Funs.attention on queries of 5 positions and keys of 7, 4 heads of
    # depth 8, each query i seeing keys j <= i + 2: with `fuse: true` one
    # scaled_dot_product_attention op, within `rtol` of the formula on the
    # values as stored and of the unfused program
    defp check_attention(type, rtol) do
      shape = fn t -> {2, t, 4, 8} end

      [q, k, v] =
        for {t, scale} <- [{5, 1.0}, {7, 1.5}, {7, 2.0}] do
          n = 2 * t * 4 * 8
          values(n, scale) |> Nx.tensor(type: type) |> Nx.reshape(shape.(t))
        end

      allowed = fn i, j -> j <= i + 2 end

      mask =
        Nx.tensor(for(i <- 0..4, do: for(j <- 0..6, do: (allowed.(i, j) && 1) || 0)), type: :u8)

      mask = Nx.reshape(mask, {1, 1, 5, 7})
      args = Enum.map([q, k, v, mask], &Nx.backend_transfer(&1, ExMLX.Backend))
      expected = attention_formula(to_lists(q), to_lists(k), to_lists(v), allowed)

      fused = fn q, k, v, mask -> Funs.attention(q, k, v, mask) end
      {got, ops} = run(fused, args, fuse: true)
      assert Enum.count(ops, &(&1 == :scaled_dot_product_attention)) == 1
      assert :attention_admitted not in ops
      assert :exp not in ops and :matmul not in ops
      assert got.type == type and got.shape == {2, 5, 4, 8}
      assert_close(got, expected, rtol)

      plain = fn q, k, v, mask -> Funs.attention(q, k, v, mask) end
      {unfused, plain_ops} = run(plain, args, [])
      assert :scaled_dot_product_attention not in plain_ops and :exp in plain_ops
      assert_close(got, Nx.to_flat_list(unfused), rtol)
    end

    test "Bumblebee's attention outside a loop is one scaled_dot_product_attention op" do
      check_attention({:f, 32}, 1.0e-5)
    end

    test "Bumblebee's attention in bfloat16 outside a loop is one scaled_dot_product_attention op" do
      # the unfused program rounds the scores, scaled scores and weights to
      # bfloat16; MLX's kernel rounds the product only
      check_attention({:bf, 16}, 4 * 2 ** -8)
    end

    # `attention` (Funs.attention_in_loop, a function of the calling test's own:
    # programs are cached by function) of `queries` query positions over 7 keys (2 batch
    # entries, 4 heads of depth 8) under the mask `allowed`, fused: one
    # attention_admitted op in the loop's body, within 1e-5 of the formula
    # (which leaves the keys a query is not admitted to out) and of the
    # unfused program
    defp check_admitted(attention, queries, allowed) do
      [q, k, v] =
        for {t, scale} <- [{queries, 1.0}, {7, 1.5}, {7, 2.0}] do
          values(2 * t * 4 * 8, scale) |> Nx.tensor(type: :f32) |> Nx.reshape({2, t, 4, 8})
        end

      rows = for i <- 0..(queries - 1), do: for(j <- 0..6, do: (allowed.(i, j) && 1) || 0)
      mask = Nx.tensor(rows, type: :u8) |> Nx.reshape({1, 1, queries, 7})
      args = Enum.map([q, k, v, mask], &Nx.backend_transfer(&1, ExMLX.Backend))
      expected = attention_formula(to_lists(q), to_lists(k), to_lists(v), allowed)
      {got, ops} = run(attention, args, fuse: true)
      assert Enum.count(ops, &(&1 == :attention_admitted)) == 1
      assert_close(got, expected, 1.0e-5)
      {unfused, _ops} = run(attention, args, [])
      assert_close(got, Nx.to_flat_list(unfused), 1.0e-5)
    end

    test "a decoding step's query is attended over the keys admitted, those after left out" do
      attention = fn q, k, v, m -> Funs.attention_in_loop(q, k, v, m) end
      check_admitted(attention, 1, fn _i, j -> j <= 3 end)
    end

    test "a padded prompt's attention keeps its mask over the keys given" do
      # key 0 is padding; query i sees keys 1..i + 1
      attention = fn q, k, v, m -> Funs.attention_in_loop(q, k, v, m) end
      check_admitted(attention, 3, fn i, j -> j >= 1 and j <= i + 1 end)
    end

    test "a query admitted to no key weighs every key alike, as the bias says" do
      # query 0 sees keys 0 and 1, query 1 none: all its scores are the
      # smallest float32, its weights 1/3 each
      f32 = fn list, shape -> list |> Nx.tensor(type: :f32) |> Nx.reshape(shape) end
      q = f32.([1.0, 0.0, 0.0, 1.0], {1, 2, 1, 2})
      k = f32.([1.0, 0.0, 0.0, 1.0, 5.0, 5.0], {1, 3, 1, 2})
      v = f32.([2.0, 4.0, 9.0], {1, 3, 1, 1})
      mask = Nx.tensor([[[[1, 1, 0], [0, 0, 0]]]], type: :u8)
      args = Enum.map([q, k, v, mask], &Nx.backend_transfer(&1, ExMLX.Backend))

      {got, ops} = run(fn q, k, v, m -> Funs.attention_in_loop(q, k, v, m) end, args, fuse: true)

      assert :attention_admitted in ops
      # query 0: scores q·k / sqrt(2) over keys 0 and 1 (1/sqrt(2) and 0)
      w = :math.exp(1 / :math.sqrt(2))
      assert_close(got, [(2 * w + 4) / (w + 1), (2 + 4 + 9) / 3], 1.0e-6)

      {unfused, _ops} = run(fn q, k, v, m -> Funs.attention_in_loop(q, k, v, m) end, args, [])

      assert_close(got, Nx.to_flat_list(unfused), 1.0e-6)
    end

    # One query row per head over keys of which the last two are admitted
    # to none, in bfloat16 at a depth of 16, on the default device: the
    # keys before them given to MLX without a mask (on a CUDA GPU MLX's
    # one-query kernel); within bfloat16's rounding of the formula
    test "one query's attention over the keys admitted in bfloat16 is within rounding of the formula" do
      device = ExMLX.default_device()
      {batch, heads, keys, depth} = {2, 4, 7, 16}

      bf16 = fn values, shape ->
        values
        |> Nx.tensor(type: :bf16)
        |> Nx.reshape(shape)
        |> Nx.transpose(axes: [0, 2, 1, 3])
      end

      q = bf16.(values(batch * heads * depth, 1.0), {batch, 1, heads, depth})
      k = bf16.(values(batch * keys * heads * depth, 1.5), {batch, keys, heads, depth})
      v = bf16.(values(batch * keys * heads * depth, 2.0), {batch, keys, heads, depth})
      allowed = fn _i, j -> j <= 4 end

      to_mlx = fn t ->
        ExMLX.from_binary(Nx.to_binary(t), Nx.type(t), Nx.shape(t), device: device)
      end

      [qx, kx, vx] = Enum.map([q, k, v], to_mlx)
      bits = for j <- 0..(keys - 1), into: <<>>, do: <<if(allowed.(0, j), do: 1, else: 0)>>
      admitted = ExMLX.from_binary(bits, :bool, {1, 1, 1, keys}, device: device)
      got = ExMLX.attention_admitted(qx, kx, vx, admitted, scale: 1 / :math.sqrt(depth))
      assert ExMLX.shape(got) == {batch, heads, 1, depth}
      assert ExMLX.type(got) == {:bf, 16}

      layout = fn t -> t |> Nx.transpose(axes: [0, 2, 1, 3]) |> to_lists() end
      expected = attention_formula(layout.(q), layout.(k), layout.(v), allowed)

      got =
        got |> ExMLX.to_binary() |> Nx.from_binary(:bf16) |> Nx.reshape({batch, heads, 1, depth})

      assert_close(Nx.transpose(got, axes: [0, 2, 1, 3]), expected, 4 * 2 ** -8)
    end

    test "attention_admitted names what its mask lacks" do
      t = fn shape, type -> ExMLX.full(0.0, type, shape) end
      q = t.({1, 4, 2, 8}, {:f, 32})
      kv = t.({1, 2, 3, 8}, {:f, 32})
      admitted = ExMLX.full(1, :bool, {1, 1, 2, 3})
      assert ExMLX.shape(ExMLX.attention_admitted(q, kv, kv, admitted)) == {1, 4, 2, 8}

      assert_raise ExMLX.Error,
                   "admitted: attention_admitted needs a boolean mask, got {:u, 8}",
                   fn -> ExMLX.attention_admitted(q, kv, kv, ExMLX.full(1, {:u, 8}, {1, 3})) end

      assert_raise ExMLX.Error,
                   "admitted: attention_admitted needs a mask broadcastable to the scores' " <>
                     "shape {1, 4, 2, 3}, got {1, 1, 2, 2}",
                   fn ->
                     ExMLX.attention_admitted(q, kv, kv, ExMLX.full(1, :bool, {1, 1, 2, 2}))
                   end
    end

    test "an attention whose softmax is over another axis keeps its ops" do
      q = Nx.tensor(values(2 * 3 * 2 * 4, 1.0), type: :f32) |> Nx.reshape({2, 3, 2, 4})
      k = Nx.tensor(values(2 * 3 * 2 * 4, 2.0), type: :f32) |> Nx.reshape({2, 3, 2, 4})
      mask = Nx.broadcast(Nx.tensor(1, type: :u8), {1, 1, 3, 3})
      args = Enum.map([q, k, k, mask], &Nx.backend_transfer(&1, ExMLX.Backend))
      fused = fn q, k, v, mask -> Funs.attention(q, k, v, mask, softmax_axis: 2) end
      {got, ops} = run(fused, args, fuse: true)
      # (the softmax alone is MLX's kernel)
      assert :scaled_dot_product_attention not in ops and :softmax in ops
      assert Enum.count(ops, &(&1 == :matmul)) == 2
      plain = fn q, k, v, mask -> Funs.attention(q, k, v, mask, softmax_axis: 2) end
      {unfused, _ops} = run(plain, args, [])
      assert_close(got, Nx.to_flat_list(unfused), 1.0e-6)
    end

    # One query row per head under an additive mask, in bfloat16 at a depth
    # of 16, on the default device: on a CUDA GPU given to MLX as two equal
    # rows (cuDNN's attention, ops/fast.rs), elsewhere as it is; either way
    # one result row within bfloat16's rounding of the formula
    test "one query's masked attention in bfloat16 is within rounding of the formula" do
      device = ExMLX.default_device()
      {batch, heads, keys, depth} = {2, 4, 7, 16}

      bf16 = fn values, shape ->
        values
        |> Nx.tensor(type: :bf16)
        |> Nx.reshape(shape)
        |> Nx.transpose(axes: [0, 2, 1, 3])
      end

      q = bf16.(values(batch * heads * depth, 1.0), {batch, 1, heads, depth})
      k = bf16.(values(batch * keys * heads * depth, 1.5), {batch, keys, heads, depth})
      v = bf16.(values(batch * keys * heads * depth, 2.0), {batch, keys, heads, depth})
      allowed = fn _i, j -> j <= 4 end
      min = Nx.Constants.min_finite(:bf16) |> Nx.to_number()
      mask = for j <- 0..(keys - 1), do: if(allowed.(0, j), do: 0.0, else: min)

      to_mlx = fn t ->
        ExMLX.from_binary(Nx.to_binary(t), Nx.type(t), Nx.shape(t), device: device)
      end

      [qx, kx, vx, mx] = Enum.map([q, k, v, bf16.(mask, {1, 1, 1, keys})], to_mlx)
      got = ExMLX.scaled_dot_product_attention(qx, kx, vx, mx, scale: 1 / :math.sqrt(depth))
      assert ExMLX.shape(got) == {batch, heads, 1, depth}
      assert ExMLX.type(got) == {:bf, 16}

      layout = fn t -> t |> Nx.transpose(axes: [0, 2, 1, 3]) |> to_lists() end
      expected = attention_formula(layout.(q), layout.(k), layout.(v), allowed)

      got =
        got |> ExMLX.to_binary() |> Nx.from_binary(:bf16) |> Nx.reshape({batch, heads, 1, depth})

      assert_close(Nx.transpose(got, axes: [0, 2, 1, 3]), expected, 4 * 2 ** -8)
    end

    test "scaled_dot_product_attention names what its inputs lack" do
      t = fn shape, type -> ExMLX.full(0.0, type, shape) end
      q = t.({1, 4, 2, 8}, {:f, 32})
      kv = t.({1, 2, 3, 8}, {:f, 32})
      mask = t.({1, 1, 2, 3}, {:f, 32})

      assert ExMLX.scaled_dot_product_attention(q, kv, kv, mask).shape == {1, 4, 2, 8}

      assert_raise ExMLX.Error,
                   "queries: scaled_dot_product_attention needs tensors of rank 4 " <>
                     "({batch, heads, sequence, depth}), got shape {4, 2, 8}",
                   fn ->
                     ExMLX.scaled_dot_product_attention(t.({4, 2, 8}, {:f, 32}), kv, kv, mask)
                   end

      assert_raise ExMLX.Error,
                   "keys: scaled_dot_product_attention needs the queries' head count to be " <>
                     "a multiple of the keys' and values'; got queries {1, 3, 2, 8}, " <>
                     "keys {1, 2, 3, 8}, values {1, 2, 3, 8}",
                   fn ->
                     ExMLX.scaled_dot_product_attention(t.({1, 3, 2, 8}, {:f, 32}), kv, kv, mask)
                   end

      assert_raise ExMLX.Error,
                   "mask: scaled_dot_product_attention needs a mask broadcastable to the " <>
                     "scores' shape {1, 4, 2, 3}, got {1, 1, 2, 2}",
                   fn ->
                     ExMLX.scaled_dot_product_attention(q, kv, kv, t.({1, 1, 2, 2}, {:f, 32}))
                   end

      assert_raise ExMLX.Error,
                   "values: scaled_dot_product_attention needs queries, keys and values of " <>
                     "one type, got {:f, 32} and {:bf, 16}",
                   fn ->
                     ExMLX.scaled_dot_product_attention(q, kv, t.({1, 2, 3, 8}, {:bf, 16}), mask)
                   end
    end

    # Rotary embedding computed here: x as lists `[b][token][head][d]`, each
    # token's position `p` from `positions` (`[b][token]`); the pair
    # (i, i + d/2) rotated by p · 10000^(-2i/d)
    defp rotary_formula(x, positions) do
      for {xb, pb} <- Enum.zip(x, positions) do
        for {xt, p} <- Enum.zip(xb, pb) do
          for row <- xt do
            half = div(length(row), 2)
            {x1, x2} = Enum.split(row, half)

            angles = for i <- 0..(half - 1), do: p * :math.pow(10_000, -2 * i / length(row))

            first =
              Enum.zip_with([x1, x2, angles], fn [a, b, t] ->
                a * :math.cos(t) - b * :math.sin(t)
              end)

            second =
              Enum.zip_with([x1, x2, angles], fn [a, b, t] ->
                b * :math.cos(t) + a * :math.sin(t)
              end)

            first ++ second
          end
        end
      end
    end

    # Funs.rotary on 2 batch entries at positions 3 and 6, one token each, 4
    # heads of depth 16, on the default device: with `fuse: true` one rope op
    # on a GPU (on the CPU the ops stay: MLX's CPU rope is its composed
    # form), within `rtol` of the formula on the values as stored and of the
    # unfused program
    defp check_rotary(type, rtol) do
      device = ExMLX.default_device()
      x = values(2 * 1 * 4 * 16, 2.0) |> Nx.tensor(type: type) |> Nx.reshape({2, 1, 4, 16})
      ids = Nx.tensor([[3], [6]])
      args = Enum.map([x, ids], &Nx.backend_transfer(&1, ExMLX.Backend))
      expected = rotary_formula(to_lists(x), [[3], [6]])

      fused = fn x, ids -> Funs.rotary(x, ids) end
      {got, ops} = run(fused, args, fuse: true, device: device)

      if device == :gpu do
        assert Enum.count(ops, &(&1 == :rope)) == 1
        assert :cos not in ops and :sin not in ops and :concatenate not in ops
      else
        assert :rope not in ops and :concatenate in ops
      end

      assert got.type == type and got.shape == {2, 1, 4, 16}
      assert_close(got, expected, rtol)

      plain = fn x, ids -> Funs.rotary(x, ids) end
      {unfused, plain_ops} = run(plain, args, device: device)
      # (the tables, of constants, are constants of the program)
      assert :rope not in plain_ops and :concatenate in plain_ops
      assert_close(got, Nx.to_flat_list(unfused), rtol)
    end

    test "Bumblebee's rotary embedding of one token is one rope op on a GPU with fuse: true" do
      check_rotary({:f, 32}, 1.0e-5)
    end

    test "Bumblebee's rotary embedding in bfloat16 is one rope op" do
      # the unfused program rounds the tables, both products and the sum to
      # bfloat16; MLX's kernel rounds the result only
      check_rotary({:bf, 16}, 3 * 2 ** -8)
    end

    test "the rotary embedding of one token is recognised with its input, positions and frequencies" do
      x = Nx.template({2, 1, 4, 16}, :bf16)
      ids = Nx.template({2, 1}, :s64)
      expr = Nx.Defn.debug_expr(&Funs.rotary/2).(x, ids)

      assert {:rope, x, idx, f} = ExMLX.Compiler.FusedKernels.match(expr)
      assert %Nx.Defn.Expr{op: :parameter, args: [0]} = x.data
      # (the cast to s64 of s64 ids is no node)
      assert %Nx.Defn.Expr{op: :parameter, args: [1]} = idx.data
      assert f.shape == {8} and f.type == {:f, 32}

      # several tokens a batch entry: not this form
      expr =
        Nx.Defn.debug_expr(&Funs.rotary/2).(
          Nx.template({2, 3, 4, 16}, :bf16),
          Nx.template({2, 3}, :s64)
        )

      assert ExMLX.Compiler.FusedKernels.match(expr) == nil
    end

    test "a rotary embedding of several tokens keeps its ops" do
      # (their positions are rows of the table, which need not follow each
      # other: MLX's kernel takes one offset per batch entry)
      x = values(1 * 3 * 2 * 8, 1.0) |> Nx.tensor(type: :f32) |> Nx.reshape({1, 3, 2, 8})
      ids = Nx.tensor([[5, 1, 2]])
      args = Enum.map([x, ids], &Nx.backend_transfer(&1, ExMLX.Backend))
      fused = fn x, ids -> Funs.rotary(x, ids) end
      {got, ops} = run(fused, args, fuse: true, device: ExMLX.default_device())
      assert :rope not in ops and :concatenate in ops
      assert_close(got, rotary_formula(to_lists(x), [[5, 1, 2]]), 1.0e-5)
    end

    test "rope names what its inputs lack" do
      x = ExMLX.full(1.0, {:f, 32}, {2, 4, 1, 8})
      offsets = ExMLX.full(3, {:s, 64}, {2})
      freqs = ExMLX.full(100.0, {:f, 32}, {4})
      assert ExMLX.rope(x, offsets, freqs, 8).shape == {2, 4, 1, 8}

      assert_raise ExMLX.Error,
                   "dims: rope needs an even number of dimensions from 2 to the tensor's 8 " <>
                     "features, got 7",
                   fn -> ExMLX.rope(x, offsets, freqs, 7) end

      assert_raise ExMLX.Error,
                   "freqs: rope needs freqs of shape {2} for 4 dimensions, got {4}",
                   fn -> ExMLX.rope(x, offsets, freqs, 4) end

      assert_raise ExMLX.Error,
                   "offset: rope needs a scalar offset or one per entry of the tensor's " <>
                     "first axis ({2}), got shape {3}",
                   fn -> ExMLX.rope(x, ExMLX.full(3, {:s, 64}, {3}), freqs, 8) end

      assert_raise ExMLX.Error, "offset: rope needs an integer offset, got {:f, 32}", fn ->
        ExMLX.rope(x, ExMLX.full(3.0, {:f, 32}, {2}), freqs, 8)
      end

      assert_raise ExMLX.Error,
                   "tensor: rope needs a tensor of rank 3 or more ({..., sequence, features}), " <>
                     "got shape {8}",
                   fn -> ExMLX.rope(ExMLX.full(1.0, {:f, 32}, {8}), offsets, freqs, 8) end
    end

    # hidden {1, 3, 4} · kernel {4, 5}: small integers, exact in float32;
    # the lists, and the tensors on ExMLX.Backend
    defp logits_inputs do
      hidden = for p <- 0..2, do: for(i <- 0..3, do: (p + 1) * (i - 1) * 1.0)
      kernel = for i <- 0..3, do: for(v <- 0..4, do: (v - i) * 1.0)

      args = [
        Nx.tensor([hidden], backend: ExMLX.Backend),
        Nx.tensor(kernel, backend: ExMLX.Backend)
      ]

      {hidden, kernel, args}
    end

    defp product_rows(hidden, kernel) do
      for row <- hidden do
        for v <- 0..4, do: Enum.sum(Enum.zip_with(row, kernel, &(&1 * Enum.at(&2, v))))
      end
    end

    test "the last row of a product is the product of the last row with fuse: true" do
      {hidden, kernel, args} = logits_inputs()

      expected = [List.last(product_rows(hidden, kernel))]

      for fuse <- [true, false] do
        fun = fn h, k -> Funs.last_logits(h, k) end
        {got, ops} = run(fun, args, fuse: fuse)
        assert Nx.to_list(got) == expected
        # fused: the hidden row sliced, then its product; else the other way
        sliced_first =
          Enum.find_index(ops, &(&1 == :slice)) < Enum.find_index(ops, &(&1 == :tensordot))

        assert sliced_first == fuse
      end
    end

    test "a slice of the product's columns keeps the whole product" do
      {hidden, kernel, args} = logits_inputs()

      fun = fn h, k -> Funs.some_logits(h, k) end
      {got, ops} = run(fun, args, fuse: true)
      assert Nx.to_list(got) == [Enum.map(product_rows(hidden, kernel), &Enum.take(&1, 2))]
      assert Enum.find_index(ops, &(&1 == :tensordot)) < Enum.find_index(ops, &(&1 == :slice))
    end

    test "a normalization over another axis keeps its ops" do
      rows = Enum.chunk_every(values(4 * 8, 3.0), 8)
      x = Nx.tensor(rows, type: :f32, backend: ExMLX.Backend)
      w = Nx.tensor(values(8, 1.0), type: :f32, backend: ExMLX.Backend)
      fused = fn x, w -> Funs.column_norm(x, w) end
      {got, ops} = run(fused, [x, w], fuse: true)
      assert :rms_norm not in ops and :rsqrt in ops
      plain = fn x, w -> Funs.column_norm(x, w) end
      {unfused, _ops} = run(plain, [x, w], [])
      assert Nx.to_binary(got) == Nx.to_binary(unfused)
    end
  end
end
