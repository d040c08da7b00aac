if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Compiler do
    @moduledoc """
    A `Nx.Defn` compiler: a `defn` function becomes one program of MLX ops
    that the device's worker runs in a single call.

        Nx.Defn.jit(&MyModule.predict/2, compiler: ExMLX.Compiler).(params, x)
        Nx.Defn.global_default_options(compiler: ExMLX.Compiler)

    Options: `:device` (`:cpu` or `:gpu`; default `ExMLX.default_device/0`).

    The first call with given input shapes and types traces the function and
    records the ops ExMLX.Backend runs for it (each an op of the op table,
    docs/architecture.md) as a program, cached by the function and the input
    templates (in an ETS table, at most 4,096 programs); every call then is
    one lookup and one NIF call, and returns lazy tensors on `ExMLX.Backend`.

    `export/3` writes a compiled function in the program format
    (docs/program-format.md) and `import/1` runs it without tracing.

    Not yet compiled: functions whose graph needs data while it runs
    (`while` loops, `cond`, hooks, reading a tensor) — those run on
    `Nx.Defn.Evaluator` with ExMLX.Backend, which gives the same results
    call by call; the reason is logged (at `:debug`) when the function is
    first traced for given input templates.

        iex> f = Nx.Defn.jit(fn a, b -> Nx.multiply(Nx.add(a, b), 2) end, compiler: ExMLX.Compiler)
        iex> f.(Nx.tensor([1.0, 2.0]), Nx.tensor([3.0, 4.0])) |> Nx.to_flat_list()
        [8.0, 12.0]
    """

    @behaviour Nx.Defn.Compiler

    require Logger

    alias ExMLX.{Call, Native, Op}
    alias Nx.Defn.{Composite, Expr}

    # Ops of the graph that need more than recording: they run on the
    # Evaluator (hooks call user code on every run).
    @not_compiled [:hook, :token, :attach_token, :while, :cond, :runtime_call]

    @impl true
    def __partitions_options__(opts), do: [opts]

    @impl true
    def __to_backend__(opts), do: {ExMLX.Backend, device: device(opts)}

    @impl true
    def __jit__(key, vars, fun, args_list, opts),
      do: __compile__(key, vars, fun, opts).(args_list)

    @impl true
    def __compile__(key, vars, fun, opts) do
      device = device(opts)

      fn args_list ->
        Enum.map(args_list, fn args ->
          tensors = Enum.map(args, fn arg -> arg.() end)
          cache_key = {key, device, Enum.map(tensors, &template/1)}

          compiled =
            ExMLX.ProgramCache.fetch(cache_key, fn ->
              compile(key, vars, fun, tensors, device, opts)
            end)

          run(compiled, key, vars, fun, tensors, device, opts)
        end)
      end
    end

    defp device(opts), do: Keyword.get(opts, :device, ExMLX.default_device())

    defp template(%Nx.Tensor{shape: shape, type: type, names: names, vectorized_axes: v}),
      do: {shape, type, names, v}

    # -------------------------------------------------------------------------
    # Compiling: record the backend's ops on symbolic inputs
    # -------------------------------------------------------------------------

    defp compile(key, vars, fun, tensors, device, opts) do
      case not_compiled(fun.(vars)) do
        nil -> record(key, vars, fun, tensors, device, opts)
        op -> evaluator("its graph has a #{inspect(op)} node")
      end
    rescue
      e in Op.Unrecordable -> evaluator(Exception.message(e))
    end

    defp record(key, vars, fun, tensors, device, opts) do
      {output, recording} =
        Op.record_program(length(tensors), device, fn refs ->
          symbolic =
            Enum.zip_with(tensors, refs, fn t, ref ->
              fn -> %{t | data: %ExMLX.Backend{ref: ref, device: device}} end
            end)

          Nx.with_default_backend({ExMLX.Backend, device: device}, fn ->
            [output] =
              Nx.Defn.Evaluator.__jit__(key, vars, fun, [symbolic], Keyword.delete(opts, :device))

            output
          end)
        end)

      outputs = output |> List.wrap() |> Composite.flatten_list()
      # (an output can be a tensor the graph captured from another backend)
      output_refs = Enum.map(outputs, &device_ref(&1, device))
      types = Enum.map(outputs, &ExMLX.Backend.storage_type(&1.type))

      {inputs, constants, instructions, slots} =
        Op.program(recording, length(tensors), output_refs)

      program = Native.program_new(device, inputs, constants, instructions, slots) |> Call.value()

      ExMLX.ProgramCache.put_spec(program, {device, inputs, constants, instructions, slots})
      {:program, %{program: program, output: output, types: types}}
    end

    defp evaluator(reason) do
      Logger.debug("ExMLX.Compiler: running on Nx.Defn.Evaluator: #{reason}")
      {:evaluator, reason}
    end

    # The first op of @not_compiled in the graph, or nil.
    defp not_compiled(expr) do
      {_, {_seen, found}} = Composite.traverse(expr, {%{}, nil}, &find_not_compiled/2)
      found
    end

    defp find_not_compiled(t, {_seen, found} = acc) when found != nil, do: {t, acc}

    defp find_not_compiled(%Nx.Tensor{data: %Expr{id: id, op: op}} = t, {seen, nil}) do
      cond do
        is_map_key(seen, id) ->
          {t, {seen, nil}}

        op in @not_compiled ->
          {t, {seen, op}}

        true ->
          {_, acc} =
            Nx.Defn.Tree.apply_args(t, :all, {Map.put(seen, id, true), nil}, &find_not_compiled/2)

          {t, acc}
      end
    end

    defp find_not_compiled(t, acc), do: {t, acc}

    # -------------------------------------------------------------------------
    # Export and import (docs/program-format.md)
    # -------------------------------------------------------------------------

    @exporting :ex_mlx_compiler_exporting

    @doc """
    The program `fun` compiles to for `args` (tensors, or numbers), as bytes
    in the program format (docs/program-format.md): store them, and
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
      previous = Process.put(@exporting, true)

      spec =
        try do
          apply(Nx.Defn.jit(fun, Keyword.put(opts, :compiler, __MODULE__)), args)
          Process.get(@exporting)
        after
          if previous, do: Process.put(@exporting, previous), else: Process.delete(@exporting)
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
    defp run({:program, compiled}, _key, _vars, _fun, tensors, device, _opts) do
      if Process.get(@exporting),
        do: Process.put(@exporting, ExMLX.ProgramCache.spec(compiled.program))

      refs = Enum.map(tensors, &device_ref(&1, device))
      results = Native.program_start(compiled.program, refs, compiled.types) |> Call.value()

      {output, []} =
        Composite.traverse(compiled.output, results, fn t, [ref | rest] ->
          {%{t | data: %ExMLX.Backend{ref: ref, device: device}}, rest}
        end)

      output
    end

    defp run({:evaluator, reason}, key, vars, fun, tensors, device, opts) do
      if Process.get(@exporting), do: Process.put(@exporting, {:evaluator, reason})

      args = Enum.map(tensors, fn t -> fn -> t end end)

      Nx.with_default_backend({ExMLX.Backend, device: device}, fn ->
        [output] =
          Nx.Defn.Evaluator.__jit__(key, vars, fun, [args], Keyword.delete(opts, :device))

        output
      end)
    end

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
