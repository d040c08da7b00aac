if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Compiler do
    @moduledoc """
    A `Nx.Defn` compiler: a `defn` function becomes one program of MLX ops
    that the device's worker runs in a single call.

        Nx.Defn.jit(&MyModule.predict/2, compiler: ExMLX.Compiler).(params, x)
        Nx.Defn.global_default_options(compiler: ExMLX.Compiler)

    Options (any other is an `ArgumentError` naming it):

      * `:device` - `:cpu` or `:gpu`; default `ExMLX.default_device/0`.
      * `:fuse` - `false` (the default) or `true`: fuse element-wise ops. On
        the CPU, with ExMLX's CPU kernels on (`ExMLX.cpu_kernels?/0`), every
        group of exactly rounded float32 ops (`add`, `subtract`, `multiply`,
        `divide`, `max`, `min`, `negate`, `abs`, `sqrt`, `square`) whose
        intermediate results nothing else reads (in loops and branches too)
        runs as one pass over its inputs from 4,096 elements, with the bits
        of the unfused program; other ops are MLX's kernels as without
        `:fuse` (docs/numerics.md). On a GPU a program without
        `while`/`cond` runs through MLX's compile (kernels built with NVRTC
        at the first call); in one with them, each run of 4 or more ops
        between them does (a `while` body of ops: a language model's
        decoding step), and what MLX cannot trace runs unfused. Fused
        GPU results are close to, not bit-equal with, unfused ones. On
        every device, the composed forms of RMS normalization (over the
        last axis, scaled by a weight: Bumblebee's `rms_norm` layers), of
        softmax (Axon's) and of attention (Bumblebee's weights and output:
        scaled scores plus a mask, softmax, product with the values) run as
        MLX's `rms_norm`, `softmax` and `scaled_dot_product_attention`
        kernels (`ExMLX.rms_norm/3`, `ExMLX.softmax/2`,
        `ExMLX.scaled_dot_product_attention/5`): one op each instead of five
        to nine, with MLX's rounding (docs/numerics.md); on a GPU so is
        Bumblebee's rotary embedding of one token per batch entry (a
        decoding step), as MLX's `rope` (`ExMLX.rope/5`). A `while` loop's
        key/value cache that the loop writes `{batch, position, heads,
        depth}` and reads only through `Nx.transpose(axes: [0, 2, 1, 3])`
        (Bumblebee's) is held `{batch, heads, position, depth}` while the
        loop runs: each step writes its rows transposed, and the attention
        reads the cache as stored. On the CPU, when each step writes
        key/value heads repeated for grouped-query attention (Bumblebee's
        `repeat_interleave`) into a cache known to hold such repeats, the
        cache holds each head once, and MLX's attention repeats them. The
        same values; the loop's result is given back in the first layout.
        A slice of a matrix product that keeps the right operand's axes
        whole (the prompt's last logits) is the product of the left
        operand's slice.
      * `:hooks` - a map of hook names to functions, replacing named hooks'
        functions (see below).
      * `:batch_keys` - set by `Nx.Serving`; it changes nothing here.

    The first call with given input shapes and types traces the function and
    records the ops ExMLX.Backend runs for it (each an op of the op table,
    docs/architecture.md) as a program, cached by the function and the input
    templates (in an ETS table, at most 4,096 programs); every call then is
    one lookup and one NIF call that returns at once, with tensors on
    `ExMLX.Backend` that the device's worker fills: it runs the program and
    evaluates all its outputs together (reading one waits for that). Each
    such tracing emits the telemetry event `[:ex_mlx, :compiler, :compile]`
    with the time it took (ExMLX.Telemetry); the device's own work at the
    first run (MLX compiling fused kernels, say) is not part of it.
    `Nx.Defn.compile/3` traces and records when it is called, and the
    function it returns holds its program: its calls do not look the
    function up, in whatever process they run (`Nx.Serving` runs each batch
    in a process of its own). A program for quantized arguments is kept
    under the program for plain ones and their quantization.

    Quantized arguments (`ExMLX.Quantization`) are inputs as they are
    stored, their format part of the cache key: `Nx.dot` with a quantized
    kernel runs MLX's `quantized_matmul` inside the program.

    `export/3` writes a compiled function in the program format
    (docs/program-format.md) and `import/1` runs it without tracing.

    `while` loops and `cond` run on the worker, inside the program: a loop
    reads its condition there step by step, and is not unrolled. Hooks
    (`hook/3`, `Nx.Defn.Kernel.print_value/2` ...) outside `while`/`cond`
    are called after the run, in the graph's order, with their values;
    `:hooks` given to `Nx.Defn.jit/2` replace named hooks' functions.

    What a program cannot hold — a `runtime_call`, a hook inside
    `while`/`cond`, a backend callback that reads data while it runs (such
    as `Nx.reduce/4` with a function) — makes that function run on
    `Nx.Defn.Evaluator` with ExMLX.Backend instead, which gives the same
    results call by call; the reason is logged (at `:debug`) when the
    function is first traced for given input templates.

        iex> f = Nx.Defn.jit(fn a, b -> Nx.multiply(Nx.add(a, b), 2) end, compiler: ExMLX.Compiler)
        iex> f.(Nx.tensor([1.0, 2.0]), Nx.tensor([3.0, 4.0])) |> Nx.to_flat_list()
        [8.0, 12.0]
    """

    @behaviour Nx.Defn.Compiler

    require Logger

    alias ExMLX.{Call, Native, Op}
    alias ExMLX.Compiler.{Lowering, QuantizedInputs}
    alias Nx.Defn.Composite

    @impl true
    def __partitions_options__(opts), do: [opts]

    @impl true
    def __to_backend__(opts), do: {ExMLX.Backend, device: device(opts)}

    @impl true
    def __jit__(key, vars, fun, args_list, opts),
      do: runner(key, vars, fun, opts).(args_list)

    @impl true
    def __compile__(key, vars, fun, opts), do: runner(key, vars, fun, opts)

    # The function that runs `fun`'s program on each list of arguments. The
    # program for arguments without quantized tensors is looked up (or
    # compiled) here, once; one for quantized arguments at the call, under
    # that program and their quantization (a key cheap to hash, where the
    # cache key hashes what the function captured). The function holds
    # neither `key` nor the cache key, which both hold what `fun` captured
    # (an Axon model): Nx.Serving runs each batch of a function of
    # Nx.Defn.compile/3 in a process of its own, and a process started with
    # a function copies all it holds.
    defp runner(key, vars, fun, opts) do
      # (`:ex_mlx_export`, which export/3 passes, is not a user's option:
      # the others are checked, and `opts` keeps it for run/6)
      validate_options!(Keyword.delete(opts, :ex_mlx_export))
      device = device(opts)
      # the arguments' structure and templates: `fun` may give another graph
      # for `{x}` than for `x` (Nx.Defn.Compiler's docs ask for this)
      fuse = fuse?(opts)
      templates = Enum.map(vars, &key_template/1)
      # (named hooks given at the call decide which hooks inside loops run)
      hooked = opts |> Keyword.get(:hooks, %{}) |> Map.keys() |> Enum.sort()
      cache_key = {function_key(key), device, fuse, templates, hooked}

      compiled =
        ExMLX.ProgramCache.fetch(cache_key, fn ->
          compile(vars, fun, device, fuse, hooked, [])
        end)

      fn args_list ->
        Enum.map(args_list, fn args ->
          # quantized arguments the program reads are inputs of their own
          # (ExMLX.Quantization): another program, keyed by them too
          case QuantizedInputs.signature(compiled, args) do
            {args, []} ->
              run(compiled, vars, fun, args, device, opts)

            {args, quantized} ->
              {:program, %{program: program}} = compiled

              compiled =
                ExMLX.ProgramCache.fetch({:quantized, program, quantized}, fn ->
                  compile(vars, fun, device, fuse, hooked, quantized)
                end)

              run(compiled, vars, fun, args, device, opts)
          end
        end)
      end
    end

    defp device(opts), do: Keyword.get(opts, :device, ExMLX.default_device())

    # The options this compiler takes (the moduledoc's list, and
    # `:batch_keys`, which Nx.Serving adds to a served function's options and
    # which needs nothing here); any other key is an error that names it (a
    # compiler's option from elsewhere, EXLA's `:client` say, would otherwise
    # be ignored silently). Besides them export/3 passes `:ex_mlx_export`: the
    # call then throws what it compiled to instead of running it.
    @options [:device, :fuse, :hooks, :batch_keys]

    defp validate_options!(opts) do
      Keyword.validate!(opts, @options)
    rescue
      e in ArgumentError ->
        reraise ArgumentError,
                "ExMLX.Compiler: " <> Exception.message(e),
                __STACKTRACE__
    end

    # The function as a cache key: a closure that captured defn expressions
    # (Nx.Defn.Graph.run jits `fn _ -> expr end`) stands for its code and its
    # captured values, those expressions by their ids. An expression is a
    # graph whose shared nodes the key must not walk as a tree: hashing or
    # comparing the closure itself visits a node once per path to it, 2^45
    # times for 45 doublings of one tensor.
    # (it runs at every call: only the two facts it needs are asked for,
    # where `Function.info/1` would gather all ten)
    defp function_key(fun) when is_function(fun) do
      with {:type, :local} <- Function.info(fun, :type),
           {:env, env} <- Function.info(fun, :env),
           true <- Enum.any?(env, &match?(%Nx.Tensor{data: %Nx.Defn.Expr{}}, &1)) do
        [module, new_uniq, new_index] =
          for item <- [:module, :new_uniq, :new_index], do: elem(Function.info(fun, item), 1)

        {:closure, module, new_uniq, new_index, Enum.map(env, &captured_key/1)}
      else
        _ -> fun
      end
    end

    defp function_key(key), do: key

    defp captured_key(%Nx.Tensor{data: %Nx.Defn.Expr{id: id}} = t),
      do: {:expr, id, template(t)}

    defp captured_key(other), do: other

    defp fuse?(opts) do
      case Keyword.get(opts, :fuse, false) do
        fuse when is_boolean(fuse) -> fuse
        other -> raise ArgumentError, ":fuse must be a boolean, got: #{inspect(other)}"
      end
    end

    defp template(%Nx.Tensor{shape: shape, type: type, names: names, vectorized_axes: v}),
      do: {shape, type, names, v}

    defp template(other), do: other

    # An argument with its tensors replaced by their templates: what
    # `Composite.traverse(arg, &template/1)` gives, made on every call, so
    # plain maps (model parameters: Axon's, Bumblebee's) are mapped in place
    # instead of sorted and rebuilt as Nx.Container's traversal does.
    defp key_template(%Nx.Tensor{} = t), do: template(t)

    defp key_template(map) when is_map(map) and not is_struct(map),
      do: :maps.map(fn _key, value -> key_template(value) end, map)

    defp key_template(tuple) when is_tuple(tuple),
      do: tuple |> Tuple.to_list() |> Enum.map(&key_template/1) |> List.to_tuple()

    defp key_template(%Complex{} = c), do: c

    defp key_template(%_{} = struct),
      do: struct |> Nx.Container.traverse(nil, &{key_template(&1), &2}) |> elem(0)

    defp key_template(other), do: other

    # -------------------------------------------------------------------------
    # Compiling: record the backend's ops on symbolic inputs
    # -------------------------------------------------------------------------

    # (a cache miss: the time it took is a telemetry event, ExMLX.Telemetry)
    defp compile(vars, fun, device, fuse, hooked, quantized) do
      started = System.monotonic_time()

      {compiled, times} =
        try do
          record(vars, fun, device, fuse, hooked, quantized)
        rescue
          e in Op.Unrecordable -> {evaluator(Exception.message(e)), %{}}
        end

      measurements = Map.put(times, :duration, System.monotonic_time() - started)

      ExMLX.Telemetry.execute([:ex_mlx, :compiler, :compile], measurements, %{
        device: device,
        fuse: fuse,
        outcome: elem(compiled, 0)
      })

      compiled
    end

    # The parameters' templates (`vars`, flattened in argument order) give
    # the inputs' shapes and types; the program reads only the parameters
    # the graph uses, and only those arguments are called at run time (Nx's
    # lazy arguments, as Nx.Defn.Evaluator and EXLA do).
    defp record(vars, fun, device, fuse, hooked, quantized) do
      started = System.monotonic_time()

      # outputs devectorized, their templates kept (as Nx.Defn.Evaluator does)
      {expr, templates} =
        vars
        |> fun.()
        |> Composite.traverse([], &{Nx.devectorize(&1), [Nx.to_template(&1) | &2]})

      traced = System.monotonic_time()

      parameters = Composite.flatten_list(vars)
      sources = QuantizedInputs.sources(length(parameters), quantized)

      {{result, hooks, values, output_refs}, recording} =
        Op.record_program(length(sources), device, fn refs ->
          params = QuantizedInputs.parameters(parameters, quantized, refs, device)
          {result, hooks} = Lowering.lower(expr, params, device, hooked, fuse)
          # the outputs, then the hooks' values
          hooked = Enum.map(hooks, fn {_spec, value} -> Composite.flatten_list([value]) end)
          values = Composite.flatten_list([result]) ++ Enum.concat(hooked)
          # (an output can be a tensor the graph captured from another
          # backend, or a quantized argument given back: its values)
          {result, hooks, values, Enum.map(values, &output_ref(&1, device))}
        end)

      lowered = System.monotonic_time()
      types = Enum.map(values, &ExMLX.Backend.storage_type(&1.type))

      # (the program's inputs: the parameters it reads, in order)
      used = Op.read_inputs(recording, output_refs)
      {inputs, constants, instructions, slots} = Op.program(recording, used, output_refs)

      program =
        Native.program_new(device, inputs, constants, instructions, slots, fuse) |> Call.value()

      ExMLX.ProgramCache.put_spec(program, {device, inputs, constants, instructions, slots})

      sources = List.to_tuple(sources)

      compiled =
        {:program,
         %{
           program: program,
           used: used,
           sources: sources,
           reads: QuantizedInputs.reads(used, sources),
           result: result,
           templates: Enum.reverse(templates),
           hooks: hooks,
           types: types
         }}

      {compiled,
       %{
         trace: traced - started,
         lower: lowered - traced,
         build: System.monotonic_time() - lowered
       }}
    end

    defp evaluator(reason) do
      Logger.debug("ExMLX.Compiler: running on Nx.Defn.Evaluator: #{reason}")
      {:evaluator, reason}
    end

    # -------------------------------------------------------------------------
    # Export and import (docs/program-format.md)
    # -------------------------------------------------------------------------

    # (what a call compiled with `ex_mlx_export: true` throws: export/3)
    @exported :ex_mlx_compiler_exported

    @doc """
    The program `fun` compiles to for `args` (tensors, or numbers), as bytes
    in the program format (docs/program-format.md; `fun` is compiled, not
    run): store them, and
    `import/1` runs them in another VM without Nx's tracing. Options as for
    the compiler (`:device`). Raises `ArgumentError` for a function that
    does not compile to one program (see the module documentation).

        iex> bytes = ExMLX.Compiler.export(&Nx.multiply(&1, 3), [Nx.tensor([1, 2])])
        iex> run = ExMLX.Compiler.import(bytes)
        iex> run.([Nx.tensor([5, 6])]) |> hd() |> Nx.to_flat_list()
        [15, 18]
    """
    @spec export(function(), [Nx.Tensor.t() | number()], keyword()) :: binary()
    def export(fun, args, opts \\ []) when is_function(fun) and is_list(args) do
      jit =
        Nx.Defn.jit(
          fun,
          opts |> Keyword.put(:compiler, __MODULE__) |> Keyword.put(:ex_mlx_export, true)
        )

      spec =
        try do
          apply(jit, args)
        catch
          {@exported, spec} -> spec
        end

      case spec do
        {device, inputs, constants, instructions, outputs} ->
          tensors = Enum.map(constants, &ExMLX.Tensor.wrap(Tuple.insert_at(Op.info(&1), 0, &1)))
          ExMLX.ProgramFormat.encode(device, inputs, tensors, instructions, outputs)

        {:evaluator, reason} ->
          raise ArgumentError, "cannot export this function as one program: #{reason}"
      end
    end

    @doc """
    A function running the program in `bytes` (from `export/3`): it takes
    the list of input tensors (as `export/3` got them; copied to the
    program's device when elsewhere) and returns the list of output tensors
    on `ExMLX.Backend`, flat, in the types ExMLX stores them (booleans as
    `{:u, 8}`).
    """
    @spec import(binary()) :: ([Nx.Tensor.t()] -> [Nx.Tensor.t()])
    def import(bytes) when is_binary(bytes) do
      {program, device} = Call.run(&Native.program_load(&1, bytes))

      fn inputs when is_list(inputs) ->
        refs = Enum.map(inputs, &device_ref(Nx.to_tensor(&1), device))

        results = Call.run(&Native.program_run(&1, program, refs))
        Enum.map(results, &ExMLX.Backend.to_nx(ExMLX.Tensor.wrap(&1)))
      end
    end

    def import(other),
      do: raise(ArgumentError, "bytes: expected a binary, got: #{inspect(other)}")

    # -------------------------------------------------------------------------
    # Running
    # -------------------------------------------------------------------------

    # One NIF call that returns the outputs pending (their shapes and types
    # are the recorded ones): reading them waits for the worker, as for the
    # backend's deferred ops.
    defp run({:program, compiled}, vars, fun, args, device, opts) do
      args = List.to_tuple(args)
      # (each input: an argument, or a quantized argument's stored tensor)
      inputs =
        Enum.map(compiled.used, fn j ->
          {i, component} = elem(compiled.sources, j)
          {elem(args, i).(), component}
        end)

      # a template has no data for a program to read: Nx.Defn.Evaluator
      # runs such a call (it fails only if an op reads the template)
      if Enum.any?(inputs, &match?({%Nx.Tensor{data: %Nx.TemplateBackend{}}, _}, &1)) do
        reason = "an argument is a template (Nx.template/3)"
        run({:evaluator, reason}, vars, fun, Tuple.to_list(args), device, opts)
      else
        run_program(compiled, inputs, device, opts)
      end
    end

    defp run({:evaluator, reason}, vars, fun, args, device, opts) do
      if opts[:ex_mlx_export], do: throw({@exported, {:evaluator, reason}})

      # (Nx.Defn.Evaluator takes a key and does not read it)
      Nx.with_default_backend({ExMLX.Backend, device: device}, fn ->
        [output] =
          Nx.Defn.Evaluator.__jit__(nil, vars, fun, [args], Keyword.delete(opts, :device))

        output
      end)
    end

    defp run_program(compiled, inputs, device, opts) do
      if opts[:ex_mlx_export], do: throw({@exported, ExMLX.ProgramCache.spec(compiled.program)})

      refs =
        Enum.map(inputs, fn
          {t, :plain} -> device_ref(t, device)
          {t, component} -> QuantizedInputs.input_ref(t, component, device)
        end)

      results = Native.program_start(compiled.program, refs, compiled.types) |> Call.value()
      {result, rest} = fill(compiled.result, results, device)
      run_hooks(compiled.hooks, rest, device, Keyword.get(opts, :hooks, %{}))

      # the outputs as their (vectorized) templates say, as Nx.Defn.Evaluator gives them
      {output, []} =
        Composite.traverse(result, compiled.templates, fn t, [template | rest] ->
          {%{template | data: t.data}, rest}
        end)

      output
    end

    # The composite `recorded` with its tensors' data replaced by `refs` in
    # order: `{composite, refs left}`.
    defp fill(recorded, refs, device) do
      Composite.traverse(recorded, refs, fn t, [ref | rest] ->
        {%{t | data: %ExMLX.Backend{ref: ref, device: device}}, rest}
      end)
    end

    # Hooks are called after the run, in the graph's order, with their
    # values (the program's last outputs); `:hooks` given at the call take
    # the place of named hooks' functions.
    defp run_hooks(hooks, refs, device, overrides) do
      Enum.reduce(hooks, refs, fn {spec, value}, refs ->
        {value, refs} = fill(value, refs, device)

        case spec do
          {:fn, fun} -> fun
          {:named, name, callback} -> Map.get(overrides, name) || callback
        end
        |> case do
          nil -> :ok
          fun -> fun.(value)
        end

        refs
      end)
    end

    # An output's reference while recording: a quantized tensor's values
    # are its dequantization (an op of the program).
    defp output_ref(
           %Nx.Tensor{data: %ExMLX.Backend{quantization: %ExMLX.Quantization{} = q}},
           _device
         ),
         do: ExMLX.Quantization.dequantized(q).ref

    defp output_ref(t, device), do: device_ref(t, device)

    # The native reference of `t` on `device`, copied there if it lives on
    # another backend or device.
    defp device_ref(%Nx.Tensor{data: %ExMLX.Backend{ref: ref, device: device}}, device), do: ref

    defp device_ref(%Nx.Tensor{} = t, device) do
      %Nx.Tensor{data: %ExMLX.Backend{ref: ref}} =
        Nx.backend_copy(t, {ExMLX.Backend, device: device})

      ref
    end
  end
end
