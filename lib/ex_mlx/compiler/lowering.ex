if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Compiler.Lowering do
    @moduledoc false
    # Walks an `Nx.Defn.Expr` graph while ExMLX.Op records a program
    # (ExMLX.Op.record_program/3): every ordinary node runs its
    # ExMLX.Backend callback on the recorded values (so the program holds
    # the op-table ops the backend uses), `while` and `cond` become a loop
    # and a branch of the program (their bodies recorded as blocks), hooks
    # outside them become extra outputs the compiler hands to the hook
    # functions after the run. What the program cannot hold (a
    # `runtime_call`, a hook inside `while`/`cond`, a read of data) raises
    # ExMLX.Op.Unrecordable.
    #
    # Scopes follow Nx.Defn.Evaluator's: a `while` body and a function
    # (`fun`, a block's default expression) see only their parameters; a
    # `cond` clause sees its parents, whose values it needs are computed
    # before the `cond` (Nx.Defn.Tree.scope_ids/2 tells which ids are the
    # parents').
    #
    # The walk's state is explicit: `state` (the scope: parameters, device,
    # options) and `cache`, threaded through every node, which maps node
    # ids to their values and also holds the hooks recorded so far (key
    # `:hooks`, newest first) and the ids of scopes computed so far (keys
    # `{:scope_ids, ref}`; node ids are references, never these).

    alias ExMLX.Compiler.{CacheLayout, FusedKernels}
    alias ExMLX.Op
    alias Nx.Defn.{Composite, Expr, Tree}
    alias Nx.Tensor, as: T

    @creation_ops [:eye, :iota, :from_binary]

    @doc """
    Evaluates `expr` on `params` (functions returning the input tensors,
    as Nx.Defn.Evaluator takes them) on `device`: `{result, hooks}`, the
    hooks being `[{callback_spec, value}]` in the order the graph runs them.
    `hooked` names the hooks the call gives functions for (its `:hooks`);
    with `fuse`, the composed forms of RMS normalization and softmax are
    recorded as MLX's fused kernels (ExMLX.Compiler.FusedKernels).
    """
    def lower(expr, params, device, hooked \\ [], fuse \\ false) do
      state = %{
        params: params,
        device: device,
        scope: lazy_scope(expr),
        nested: false,
        in_loop: false,
        hooked: MapSet.new(hooked),
        fuse: fuse,
        relayout: %{}
      }

      {result, cache} = composite_eval(expr, state, %{hooks: []})
      {result, Enum.reverse(cache.hooks)}
    end

    defp composite_eval(composite, state, cache),
      do: Composite.traverse(composite, cache, &eval(&1, state, &2))

    defp eval(%T{data: %Expr{op: :tensor, args: [t]}}, _state, cache), do: {t, cache}

    defp eval(%T{data: %Expr{op: :constant, args: [constant]}} = ans, state, cache),
      do: {ExMLX.Backend.constant(ans, constant, device: state.device), cache}

    defp eval(%T{data: %Expr{op: :metadata, args: [expr, _meta]}}, state, cache),
      do: composite_eval(expr, state, cache)

    defp eval(%T{data: %Expr{id: id, op: op}} = ans, state, cache) do
      case cache do
        %{^id => result} ->
          {result, cache}

        %{} ->
          {result, cache} =
            case {state.relayout, cache} do
              {%{^id => action}, _} ->
                relayout(action, ans, state, cache)

              # (a prompt's cache made as a loop stores it: stored_initials/4)
              {_, %{{:stored, ^id} => {v, groups}}} ->
                {CacheLayout.unstored(v, groups), cache}

              {_, %{{:pending, ^id} => _}} ->
                stored_write(id, state, cache, &CacheLayout.unstored/2)

              _ ->
                eval_apply(op, ans, state, cache)
            end

          {result, Map.put(cache, id, result)}
      end
    end

    defp eval(other, _state, cache), do: {other, cache}

    # -------------------------------------------------------------------------
    # Nodes
    # -------------------------------------------------------------------------

    defp eval_apply(:parameter, %T{data: %Expr{args: [i]}}, state, cache) do
      case Enum.fetch!(state.params, i).() do
        %T{data: %Expr{}} = t ->
          raise ArgumentError,
                "cannot pass a tensor expression as argument to defn, got: #{inspect(t)}"

        %T{} = t ->
          {Nx.devectorize(t), cache}
      end
    end

    defp eval_apply(:elem, %T{data: %Expr{args: [tuple, i]}}, state, cache) do
      {tuple, cache} = composite_eval(tuple, state, cache)
      {elem(tuple, i), cache}
    end

    # (Nx after 0.13.1 names the node `io_call`, with the same arguments and
    # meaning)
    defp eval_apply(hook, %T{data: %Expr{args: args}}, state, cache)
         when hook in [:hook, :io_call] do
      [tensor_expr, spec, template, _ref] = args

      cond do
        not state.nested ->
          record_hook(tensor_expr, spec, template, state, cache)

        # a hook with no function to call has no effect: its value passes
        # through (Bumblebee's generation loop has one for streaming)
        not hook_calls?(spec, state.hooked) ->
          {value, cache} = composite_eval(tensor_expr, state, cache)
          {hook_result(value, template), cache}

        true ->
          raise Op.Unrecordable, message: "a hook inside while or cond needs its own program"
      end
    end

    # Nx 0.12's hooks: `attach_token(token, expr)` on each output tensor,
    # the shared `token` node holding the hooks (newest first), in place of
    # 0.13's `hook` nodes. The token's hooks run once (its value is cached
    # by id like any node's), oldest first, as Nx.Defn.Evaluator runs them.
    defp eval_apply(:attach_token, %T{data: %Expr{args: [token, expr]}}, state, cache) do
      {_, cache} = eval(token, state, cache)
      eval(expr, state, cache)
    end

    defp eval_apply(:token, %T{data: %Expr{args: [%{hooks: hooks}]}}, state, cache) do
      cache =
        hooks
        |> Enum.reverse()
        |> Enum.reduce(cache, fn %{expr: hooked, name: name, callback: callback}, cache ->
          spec = {:named, name, callback}

          cond do
            not state.nested ->
              {value, cache} = composite_eval(hooked, state, cache)
              push_hook(cache, spec, value)

            not hook_calls?(spec, state.hooked) ->
              cache

            true ->
              raise Op.Unrecordable, message: "a hook inside while or cond needs its own program"
          end
        end)

      {{}, cache}
    end

    defp eval_apply(:runtime_call, _ans, _state, _cache),
      do: raise(Op.Unrecordable, message: "a runtime_call runs Elixir code on data at run time")

    defp eval_apply(:fun, %T{data: %Expr{args: [args, expr, _mfa]}}, state, cache) do
      run = fn values ->
        params = Enum.map(values, fn v -> fn -> Nx.to_tensor(v) end end)
        {result, _} = composite_eval(expr, closed(state, expr, params), %{})
        result
      end

      fun =
        case length(args) do
          1 -> fn a -> run.([a]) end
          2 -> fn a, b -> run.([a, b]) end
        end

      {fun, cache}
    end

    defp eval_apply(:block, %T{data: %Expr{args: args}} = ans, state, cache) do
      [struct, in_args, expr, _callback] = args
      {in_args, cache} = Enum.map_reduce(in_args, cache, &eval(&1, state, &2))
      out = if match?({:tuple, _}, ans.type), do: expr, else: ans

      # The block's default implementation is its expression, over the
      # block's tensor arguments as parameters.
      default = fn [_struct | values] ->
        tensors = Enum.take_while(values, &(not is_list(&1)))
        params = Enum.map(tensors, fn t -> fn -> t end end)
        {result, _} = composite_eval(expr, closed(state, expr, params), %{})
        result
      end

      {ExMLX.Backend.block(struct, out, in_args, arity(1 + length(in_args), default)), cache}
    end

    defp eval_apply(:while, %T{data: %Expr{args: args}}, state, cache) do
      [initial, arg, pred, body] = args

      # (grouped-query caches held at the key/value head count on every
      # device: docs/decisions/0017 and 0018)
      plan =
        if state.fuse,
          do: CacheLayout.plan(initial, arg, pred, body),
          else: CacheLayout.none()

      {stored, cache} = stored_initials(initial, plan, state, cache)
      {initial, cache} = initial_values(initial, stored, state, cache)
      leaves = initial |> tuple_leaves() |> CacheLayout.enter(plan, stored)
      # (a quantized value, ExMLX.Quantization, is three values of the state)
      types = Enum.flat_map(leaves, &state_types/1)
      refs = Enum.flat_map(leaves, &state_refs(&1, &1, state.device))
      inner = %{closed(state, {pred, body}, []) | relayout: plan.actions, in_loop: true}

      with_state = fn state_refs ->
        {tensors, []} = rebuild(List.to_tuple(leaves), state_refs, state.device)
        %{inner | params: tensors |> Tuple.to_list() |> Enum.map(fn t -> fn -> t end end)}
      end

      results =
        Op.record_while(
          refs,
          types,
          fn state_refs ->
            {p, body_cache} = eval(pred, with_state.(state_refs), %{})
            {typed_ref(p, nil, state.device), body_cache}
          end,
          fn state_refs, body_cache ->
            {next, _} = composite_eval(body, with_state.(state_refs), body_cache)
            next |> tuple_leaves() |> Enum.zip(leaves) |> Enum.flat_map(&next_refs(&1, state))
          end
        )

      {values, []} = rebuild(List.to_tuple(leaves), results, state.device)
      {result, []} = refill(initial, values |> Tuple.to_list() |> CacheLayout.leave(plan))
      {result, cache}
    end

    defp eval_apply(:cond, %T{data: %Expr{args: [clauses, last]}}, state, cache) do
      {scope, cache} = scope_ids(state.scope, cache)
      state = %{state | scope: scope}
      cache = parents_first([last | Enum.flat_map(clauses, &Tuple.to_list/1)], state, cache)
      leaves = Composite.flatten_list([last])
      types = Enum.map(leaves, &ExMLX.Backend.storage_type(&1.type))
      inner = fn expr -> %{state | scope: lazy_scope(expr, state.scope), nested: true} end

      body_refs = fn body, body_cache ->
        {values, _} = composite_eval(body, inner.(body), body_cache)

        values
        |> then(&Composite.flatten_list([&1]))
        |> Enum.zip_with(types, &typed_ref(&1, &2, state.device))
      end

      clauses =
        Enum.map(clauses, fn {pred, body} ->
          {fn ->
             {p, pred_cache} = eval(pred, inner.({pred, body}), cache)
             {typed_ref(p, nil, state.device), pred_cache}
           end, fn pred_cache -> body_refs.(body, pred_cache) end}
        end)

      results = Op.record_cond(clauses, fn -> body_refs.(last, cache) end, types)

      {result, []} =
        Composite.traverse(last, results, fn leaf, [ref | rest] ->
          {put_ref(leaf, ref, state.device), rest}
        end)

      {result, cache}
    end

    # The transpose of a matrix product is the product of the operands in
    # the other order (Nx's gradient of `dot` gives such transposes, and
    # MLX would then run element-wise updates on a strided view).
    defp eval_apply(:transpose, %T{data: %Expr{args: [product, [1, 0]]}} = ans, state, cache) do
      case product do
        %T{data: %Expr{op: :dot, args: [a, [ca], [], b, [cb], []]}}
        when tuple_size(a.shape) == 2 and tuple_size(b.shape) == 2 ->
          {a, cache} = eval(a, state, cache)
          {b, cache} = eval(b, state, cache)
          {ExMLX.Backend.dot(ans, b, [cb], [], a, [ca], []), cache}

        _ ->
          generic(:transpose, ans, state, cache)
      end
    end

    defp eval_apply(op, ans, %{fuse: true} = state, cache) when op in [:multiply, :divide] do
      case FusedKernels.match(ans) do
        {:rms_norm, x, w, eps} -> fused(:rms_norm, ans, [x, w], [eps], state, cache)
        {:softmax, x, axes} -> fused(:softmax, ans, [x], [axes], state, cache)
        nil -> generic(op, ans, state, cache)
      end
    end

    defp eval_apply(:dot, ans, %{fuse: true} = state, cache) do
      case FusedKernels.match(ans) do
        {:attention, q, k, v, mask, scale} ->
          {[k, v], cache} = Enum.map_reduce([k, v], cache, &attention_input(&1, state, &2))

          # (inside a loop only: there the host knows a decoding step's
          # mask, which the op reads; a prompt's attention outside one
          # stays MLX's masked attention, and its program compiles whole)
          admitted = if state.in_loop, do: FusedKernels.admitted(mask)

          case admitted do
            {:ok, admitted} ->
              attention_admitted(ans, [q, k, v], admitted, scale, state, cache)

            nil ->
              fused(:scaled_dot_product_attention, ans, [q, k, v, mask], [scale], state, cache)
          end

        nil ->
          generic(:dot, ans, state, cache)
      end
    end

    # A slice of a matrix product that keeps the right operand's axes whole
    # is the product of the left operand's slice: Bumblebee's generation
    # reads the last position of the prompt's logits, and the product then
    # makes one row of logits instead of one per prompt position. (Only
    # with `fuse: true`: a product of fewer rows may round differently.)
    defp eval_apply(
           :slice,
           %T{data: %Expr{args: [x | slicing]}} = ans,
           %{fuse: true} = state,
           cache
         ) do
      case sliced_operand(FusedKernels.without_metadata(x), slicing) do
        {:ok, a, a_slicing, contract_a, b, contract_b} ->
          {[a, b], cache} = Enum.map_reduce([a, b], cache, &eval(&1, state, &2))

          # (a quantized left operand is sliced no further)
          if ExMLX.Quantization.quantized?(a) do
            generic(:slice, ans, state, cache)
          else
            [starts, lengths, strides] = a_slicing
            shape = Enum.zip_with(lengths, strides, &div(&1 + &2 - 1, &2)) |> List.to_tuple()
            a_out = %{a | shape: shape, names: List.duplicate(nil, tuple_size(shape))}
            rows = ExMLX.Backend.slice(a_out, a, starts, lengths, strides)
            {ExMLX.Backend.dot(ans, rows, contract_a, [], b, contract_b, []), cache}
          end

        :error ->
          generic(:slice, ans, state, cache)
      end
    end

    # (on the GPU only: MLX's CPU `rope` is its composed form, more ops
    # than the table lookups it replaces; bench/gpu/dispatch_probe.py)
    defp eval_apply(:add, ans, %{fuse: true, device: :gpu} = state, cache) do
      case FusedKernels.match(ans) do
        {:rope, x, idx, f} -> rope(ans, x, idx, f, state, cache)
        nil -> generic(:add, ans, state, cache)
      end
    end

    defp eval_apply(op, ans, state, cache), do: generic(op, ans, state, cache)

    # The keys or values of a fused attention: a loop's cache as it is
    # stored, even at fewer heads than the queries (MLX's attention repeats
    # them itself), else the expression.
    defp attention_input(%T{data: %Expr{id: id}} = expr, state, cache) do
      written = transposed_id(expr)
      stored = {:stored, written}

      case {state.relayout, cache} do
        {%{^id => {:read, written, _groups}}, _} -> eval(written, state, cache)
        {_, %{^stored => {value, _groups}}} -> {value, cache}
        {_, %{{:pending, ^written} => _}} -> stored_write(written, state, cache, fn v, _ -> v end)
        _ -> {expr, cache}
      end
    end

    defp attention_input(expr, _state, cache), do: {expr, cache}

    # `ans` as one op of the op table on `inputs` (expressions, or values),
    # with `params`
    defp fused(name, ans, inputs, params, state, cache) do
      {values, cache} = Enum.map_reduce(inputs, cache, &eval(&1, state, &2))
      refs = Enum.map(values, &typed_ref(&1, nil, state.device))
      {ref, device} = Op.defer(name, refs, params, ExMLX.Backend.storage_type(ans.type))
      {put_ref(ans, ref, device), cache}
    end

    # Attention under Bumblebee's bias `select(admitted, 0, min_finite)`:
    # the op given the boolean itself, whose values decide which keys MLX is
    # given (`attention_admitted`; known on the host in a decoding loop).
    defp attention_admitted(ans, qkv, admitted, scale, state, cache) do
      {values, cache} = Enum.map_reduce(qkv, cache, &eval(&1, state, &2))
      {admitted, cache} = eval(admitted, state, cache)
      refs = Enum.map(values, &typed_ref(&1, nil, state.device))
      mask = typed_ref(admitted, :bool, state.device)

      {ref, device} =
        Op.defer(
          :attention_admitted,
          refs ++ [mask],
          [scale],
          ExMLX.Backend.storage_type(ans.type)
        )

      {put_ref(ans, ref, device), cache}
    end

    # Rotary embedding at one position per batch entry: `x`
    # (`{batch, 1, heads, d}`) as `{batch, heads, 1, d}` (the same order of
    # values, the sequence axis being 1), MLX's `rope` at the offsets `idx`
    # with the periods `1 / f`, and back (ExMLX.Compiler.FusedKernels). The
    # offsets are cast to s32, exactly (they are rows of a table): MLX's CUDA
    # `rope` queues far more host work for s64 offsets (bench/gpu/dispatch_probe.py);
    # every layer's cast is one op after merge_equal_ops.
    defp rope(%T{shape: {batch, 1, heads, d} = shape} = ans, x, idx, f, state, cache) do
      {[x, idx, f], cache} = Enum.map_reduce([x, idx, f], cache, &eval(&1, state, &2))
      one = Nx.tensor(1.0, type: f.type, backend: {ExMLX.Backend, device: state.device})
      periods = Nx.divide(one, f)
      by_head = Nx.reshape(x, {batch, heads, 1, d})
      offsets = idx |> Nx.as_type(:s32) |> Nx.reshape({batch})
      refs = Enum.map([by_head, offsets, periods], &typed_ref(&1, nil, state.device))
      {ref, device} = Op.defer(:rope, refs, [d, false, 1.0], ExMLX.Backend.storage_type(ans.type))

      rotated =
        put_ref(%{ans | shape: {batch, heads, 1, d}, names: [nil, nil, nil, nil]}, ref, device)

      {Nx.reshape(rotated, shape), cache}
    end

    # A loop-carried cache held with its axes 1 and 2 swapped, possibly at
    # fewer heads (ExMLX.Compiler.CacheLayout): its write swaps the start
    # indices and the update (the repeat's source then) likewise; a
    # transpose reading it is the stored value, its heads repeated.
    defp relayout(
           {:write, update},
           %T{data: %Expr{args: [tensor, starts, _]}} = ans,
           state,
           cache
         ) do
      {tensor, cache} = eval(tensor, state, cache)
      out = %{ans | shape: tensor.shape, names: tensor.names}
      write_swapped(out, tensor, starts, update, state, cache)
    end

    defp relayout({:read, written, groups}, _ans, state, cache) do
      {value, cache} = eval(written, state, cache)
      {CacheLayout.read(value, groups), cache}
    end

    # The planned caches of a loop whose initial value is a write into
    # zeros (the prompt's cache: ExMLX.Compiler.CacheLayout.initial_write/1),
    # made as the loop stores them, so the loop takes them as they are (no
    # copy of the cache when it starts, no second cache while it runs):
    # `{index => stored value}`, and the walk's cache with each such
    # write's node valued in Nx's layout (a view of the stored value, for
    # the prompt's own attention). Every such write is noted as pending
    # (`{:pending, id}`) before any is made: the update of one reaches the
    # prompt's attentions over others (a later layer's keys need the
    # earlier layers), and an attention, or any other reader, that meets a
    # pending write makes it as stored (stored_write/4) whatever the order
    # the writes are made in here. So a layer's keys and values are both
    # stored, at their planned head counts, when its attention reads them.
    defp stored_initials(initial, %{leaves: leaves}, state, cache) do
      exprs = Composite.flatten_list([initial])

      # (a planned cache whose initial value is a constant, zeros before
      # the first write, is made as stored: the loop's first write then
      # takes its buffer over, and no cache of Nx's layout is made)
      constants =
        for {i, groups} <- leaves,
            expr = Enum.at(exprs, i),
            {:ok, number} <- [CacheLayout.initial_constant(expr)],
            into: %{},
            do: {i, stored_constant(expr, groups, number, state)}

      pending =
        for {i, groups} <- Enum.sort(leaves),
            {:ok, written, zeros, starts, update} <-
              [CacheLayout.initial_write(Enum.at(exprs, i))],
            %T{data: %Expr{id: id}} = written,
            not is_map_key(cache, id),
            do: {id, {i, groups, written, zeros, starts, update}}

      cache = Enum.reduce(pending, cache, fn {id, p}, c -> Map.put(c, {:pending, id}, p) end)

      Enum.reduce(pending, {constants, cache}, fn {id, {i, _, _, _, _, _}}, {stored, cache} ->
        {value, cache} = stored_write(id, state, cache, fn v, _ -> v end)
        {Map.put(stored, i, value), cache}
      end)
    end

    # `number` everywhere in the stored shape of a planned cache of `expr`'s
    # shape at `groups`
    defp stored_constant(expr, groups, number, state) do
      shape = CacheLayout.stored_shape(expr.shape, groups)
      out = %{expr | shape: shape, names: [nil, nil, nil, nil]}
      ExMLX.Backend.constant(out, number, device: state.device)
    end

    # The stored value of the planned write `id` (made now if pending:
    # stored_initials/4), as `view.(value, groups)`.
    defp stored_write(id, state, cache, view) do
      case cache do
        %{{:stored, ^id} => {value, groups}} ->
          {view.(value, groups), cache}

        %{{:pending, ^id} => {_i, groups, written, zeros, starts, update}} ->
          cache = Map.delete(cache, {:pending, id})
          [zero] = zeros.data.args
          empty = stored_constant(written, groups, zero, state)
          out = %{written | shape: empty.shape, names: empty.names}
          update = CacheLayout.stored_update(update, groups)
          {value, cache} = write_swapped(out, empty, starts, update, state, cache)
          {view.(value, groups), Map.put(cache, {:stored, id}, {value, groups})}
      end
    end

    # A loop's initial values, those of `stored` (index => value) as given
    # (their expressions are not evaluated: nothing else needs their Nx
    # layout, and an unread op would hold the stored value).
    defp initial_values(initial, stored, state, cache) when map_size(stored) == 0,
      do: composite_eval(initial, state, cache)

    defp initial_values(initial, stored, state, cache) do
      {values, {cache, _}} =
        Composite.traverse(initial, {cache, 0}, fn leaf, {cache, i} ->
          case stored do
            %{^i => value} ->
              {value, {cache, i + 1}}

            %{} ->
              {value, cache} = eval(leaf, state, cache)
              {value, {cache, i + 1}}
          end
        end)

      {values, cache}
    end

    # `update` (an expression) written with its axes 1 and 2 swapped into
    # `tensor` (a value stored so) at `starts` swapped likewise
    defp write_swapped(out, tensor, starts, update, state, cache) do
      {update, cache} = eval(update, state, cache)

      {starts, cache} =
        Enum.map_reduce(starts, cache, fn
          s, cache when is_integer(s) -> {s, cache}
          s, cache -> eval(s, state, cache)
        end)

      swapped = CacheLayout.swap(update)
      {ExMLX.Backend.put_slice(out, tensor, CacheLayout.swap_starts(starts), swapped), cache}
    end

    defp generic(op, ans, state, cache) do
      {args, cache} = Tree.apply_args(ans, cache, &eval(&1, state, &2))

      args =
        cond do
          op in @creation_ops -> [ans | args] ++ [[device: state.device]]
          match?({:tuple, _}, ans.type) -> args
          true -> [ans | args]
        end

      if not function_exported?(ExMLX.Backend, op, length(args)),
        do: raise(Op.Unrecordable, message: "ExMLX.Backend has no #{op}/#{length(args)}")

      {apply(ExMLX.Backend, op, args), cache}
    end

    # -------------------------------------------------------------------------
    # Helpers
    # -------------------------------------------------------------------------

    # The state of a scope that sees only its parameters (a while body, a
    # function, a block's default expression): nested, as its hooks cannot
    # be the program's outputs (its values are a callback's, or a loop
    # step's).
    defp closed(state, expr, params),
      do: %{state | params: params, scope: lazy_scope(expr), nested: true}

    # A scope's node ids (Nx.Defn.Tree.scope_ids/2), computed the first time
    # a `cond` needs them: a walk of the whole graph, which a graph without
    # a `cond` (an LSTM's unrolled training step) never needs. A scope is
    # named by a reference; its ids, once computed, are kept in the cache
    # of the scope that computed them, for the `cond`s after.
    defp lazy_scope(expr, parent \\ %{}), do: {:lazy_scope, make_ref(), expr, parent}

    defp scope_ids({:lazy_scope, ref, expr, parent}, cache) do
      case cache do
        %{{:scope_ids, ^ref} => ids} ->
          {ids, cache}

        %{} ->
          ids = Tree.scope_ids(expr, parent)
          {ids, Map.put(cache, {:scope_ids, ref}, ids)}
      end
    end

    defp scope_ids(ids, cache) when is_map(ids), do: {ids, cache}

    # Computes, in the current scope, the values of the parents' nodes that
    # the `cond` clauses `exprs` read, so that the clauses share them.
    defp parents_first(exprs, state, cache) do
      {_, {_seen, cache}} =
        Composite.traverse(List.to_tuple(exprs), {%{}, cache}, &parent_node(&1, state, &2))

      cache
    end

    defp parent_node(%T{data: %Expr{id: id}} = t, state, {seen, cache} = acc) do
      cond do
        is_map_key(seen, id) or is_map_key(cache, id) ->
          {t, acc}

        is_map_key(state.scope, id) ->
          {_, cache} = eval(t, state, cache)
          {t, {Map.put(seen, id, true), cache}}

        true ->
          {_, acc} =
            Tree.apply_args(
              t,
              :scope,
              {Map.put(seen, id, true), cache},
              &parent_node(&1, state, &2)
            )

          {t, acc}
      end
    end

    defp parent_node(other, _state, acc), do: {other, acc}

    # A while's state is its tuples' leaves (as Nx.Defn.Evaluator numbers
    # the state's parameters).
    defp tuple_leaves(tuple) when is_tuple(tuple),
      do: tuple |> Tuple.to_list() |> Enum.flat_map(&tuple_leaves/1)

    defp tuple_leaves(leaf), do: [leaf]

    # `tuple`'s structure filled with `values`, its leaves in order.
    defp refill(tuple, values) when is_tuple(tuple) do
      {items, values} = Enum.map_reduce(Tuple.to_list(tuple), values, &refill/2)
      {List.to_tuple(items), values}
    end

    defp refill(_leaf, [value | values]), do: {value, values}

    defp rebuild(tuple, refs, device) when is_tuple(tuple) do
      {items, refs} = Enum.map_reduce(Tuple.to_list(tuple), refs, &rebuild(&1, &2, device))
      {List.to_tuple(items), refs}
    end

    defp rebuild(%T{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{}}} = t, refs, device) do
      {stored, refs} = Enum.split(refs, 3)
      q = ExMLX.Quantization.with_stored_refs(t.data.quantization, stored, device)
      {%{t | data: %ExMLX.Backend{ref: nil, device: device, quantization: q}}, refs}
    end

    defp rebuild(leaf, [ref | refs], device), do: {put_ref(Nx.to_tensor(leaf), ref, device), refs}

    # A loop state's entries for one value: the storage types and the
    # references (a quantized value's packed values, scales and biases).
    defp state_types(%T{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{} = q}}),
      do: [q.packed.type, q.scales.type, q.biases.type]

    defp state_types(leaf), do: [ExMLX.Backend.storage_type(Nx.to_tensor(leaf).type)]

    defp state_refs(
           %T{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{} = q, device: device}},
           _initial,
           device
         ),
         do: ExMLX.Quantization.stored_refs(q)

    defp state_refs(%T{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{}}}, _, _device),
      do: raise(Op.Unrecordable, message: "a quantized value on another device enters a loop")

    defp state_refs(leaf, initial, device) do
      [type] = state_types(initial)
      [typed_ref(leaf, type, device)]
    end

    # The next state's entries for one value of a loop's body, `initial`
    # the value it started as: a quantized value stays one of its format.
    defp next_refs(
           {next, %T{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{} = q}}},
           state
         ) do
      case next do
        %T{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{} = n}}
        when {n.bits, n.group_size, n.transposed} == {q.bits, q.group_size, q.transposed} ->
          state_refs(next, next, state.device)

        _ ->
          raise Op.Unrecordable, message: "a loop replaces a quantized value by another value"
      end
    end

    defp next_refs({next, initial}, state), do: state_refs(next, initial, state.device)

    defp put_ref(%T{} = t, ref, device), do: %{t | data: %ExMLX.Backend{ref: ref, device: device}}

    # The reference of a value on `device`, of storage type `type` (cast
    # when recorded otherwise; `nil` keeps its type).
    defp typed_ref(%T{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{}}}, _, _device),
      do: raise(Op.Unrecordable, message: "a quantized value is a branch's or a block's result")

    defp typed_ref(value, type, device) do
      %T{type: nx_type, data: %ExMLX.Backend{ref: ref}} =
        case Nx.to_tensor(value) do
          %T{data: %ExMLX.Backend{device: ^device}} = t -> t
          t -> Nx.backend_copy(t, {ExMLX.Backend, device: device})
        end

      if type == nil or Op.recorded_type(ref, ExMLX.Backend.storage_type(nx_type)) == type,
        do: ref,
        else: Op.defer(:as_type, [ref], [type], type) |> elem(0)
    end

    # For a slice (`[starts, lengths, strides]`, all integers) of `product`:
    # `{:ok, a, a_slicing, contract_a, b, contract_b}` when `product` is
    # `dot(a, contract_a, [], b, contract_b, [])` and the slice keeps every
    # axis of the result that comes from `b` whole; `a_slicing` slices `a`'s
    # free axes as the slice does theirs and keeps its contracted axes whole.
    defp sliced_operand(
           %T{data: %Expr{op: :dot, args: [a, contract_a, [], b, contract_b, []]}} = product,
           [starts, lengths, strides]
         ) do
      free_a = Enum.reject(0..(tuple_size(a.shape) - 1), &(&1 in contract_a))
      {of_a, of_b} = Enum.split(Enum.zip([starts, lengths, strides]), length(free_a))
      dims_b = product.shape |> Tuple.to_list() |> Enum.drop(length(free_a))

      whole_b? =
        Enum.zip(of_b, dims_b)
        |> Enum.all?(fn {{s, l, st}, d} -> s == 0 and l == d and st == 1 end)

      if Enum.all?(starts, &is_integer/1) and whole_b? do
        by_axis = Map.new(Enum.zip(free_a, of_a))

        by_a_axis =
          for axis <- 0..(tuple_size(a.shape) - 1),
              do: Map.get(by_axis, axis, {0, elem(a.shape, axis), 1})

        a_slicing = for k <- 0..2, do: Enum.map(by_a_axis, &elem(&1, k))
        {:ok, a, a_slicing, contract_a, b, contract_b}
      else
        :error
      end
    end

    defp sliced_operand(_x, _slicing), do: :error

    # The id of the node `expr` transposes as Bumblebee's attention reads
    # its cache (through metadata), or nil. (A prompt's cache made as a loop
    # stores it is kept under `{:stored, id}`: stored_initials/4.)
    defp transposed_id(%T{data: %Expr{op: :transpose, args: [inner, [0, 2, 1, 3]]}}),
      do: FusedKernels.without_metadata(inner).data.id

    defp transposed_id(_expr), do: nil

    # A function of `n` arguments calling `fun` with their list (the
    # backend calls a block's default implementation with its arguments).
    for n <- 1..12 do
      args = Macro.generate_arguments(n, __MODULE__)
      defp arity(unquote(n), fun), do: fn unquote_splicing(args) -> fun.(unquote(args)) end
    end

    # Hooks: whether one has a function to call (its own, or one the call's
    # `:hooks` names), and one outside loops recorded as an extra output.
    defp hook_calls?({:token_hook, _hooked_expr, inner}, hooked), do: hook_calls?(inner, hooked)
    defp hook_calls?({:named, name, callback}, hooked), do: callback != nil or name in hooked
    defp hook_calls?(_spec, _hooked), do: true

    defp record_hook(tensor_expr, spec, template, state, cache) do
      {value, cache} = composite_eval(tensor_expr, state, cache)

      {hooked, spec, cache} =
        case spec do
          {:token_hook, hooked_expr, inner} ->
            {hooked, cache} = composite_eval(hooked_expr, state, cache)
            {hooked, inner, cache}

          spec ->
            {value, spec, cache}
        end

      {hook_result(value, template), push_hook(cache, spec, hooked)}
    end

    defp push_hook(%{hooks: hooks} = cache, spec, value),
      do: %{cache | hooks: [{spec, value} | hooks]}

    defp hook_result(value, %T{}), do: value

    defp hook_result(value, _template),
      do: value |> List.wrap() |> Composite.flatten_list() |> List.to_tuple()
  end
end
