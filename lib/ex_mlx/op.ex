defmodule ExMLX.Op do
  @moduledoc false
  # The one path from Elixir to MLX's tensors: every op of the op table
  # (native/ex_mlx/core/src/ops/table.rs) runs through run/3 or defer/4,
  # and the few calls that are not ops (moving, reading and freeing a
  # tensor's data) through the functions below them. `ExMLX`, `ExMLX.FFT`,
  # `ExMLX.Prediction` and `ExMLX.Backend` call these; nothing else calls
  # ExMLX.Native's tensor NIFs. Inputs are native tensor references;
  # results are what the NIF returns: `{ref, shape, type, device}` per
  # tensor. While ExMLX.Compiler records a program (record_program/3), ops
  # on its values are recorded instead of run.

  alias ExMLX.{Call, Native}

  defmodule Recording do
    @moduledoc false
    # A program being recorded: `values` maps each reference standing for a
    # recorded value to `{id, type}` (`{:in, i}`, `{:res, r}`), `constants`
    # each real tensor the program reads to its constant index,
    # `instructions` the current block's instructions (newest first),
    # `results` how many result values there are, `memo` the constants
    # made from real tensors (memo_constant/2), `read_inputs` the indices of
    # the inputs an instruction or an output reads, `depth` how many loop or
    # branch blocks the current block is nested in (0: the top level).
    defstruct [
      :device,
      values: %{},
      constants: %{},
      instructions: [],
      results: 0,
      memo: %{},
      read_inputs: MapSet.new(),
      depth: 0
    ]
  end

  @doc """
  Runs op `name` on `inputs` with `params` (in the table's order) and waits
  for it: `{ref, shape, type, device}`, or a list of them for an op with
  several results. Raises `ExMLX.Error` for anything MLX or ExMLX refuses.
  While a program is recorded (`record_program/3`) and an input is one of its
  values, the op is recorded instead (shape and type then `nil`).
  """
  def run(name, inputs, params) do
    if recorded?(inputs) do
      case record(name, inputs, params, :any) do
        [one] -> one
        many -> many
      end
    else
      Call.run(&Native.op(&1, name, inputs, params))
    end
  end

  @doc """
  Queues one-result op `name` without waiting: `{ref, device}` at once,
  the worker filling the tensor in the background (cast to `type`, or
  MLX's own type with `:any`). An error surfaces where the tensor is used.
  Recorded instead while a program is (see `run/3`).
  """
  def defer(name, inputs, params, type \\ :any) do
    if recorded?(inputs) do
      [{ref, _shape, _type, device}] = record(name, inputs, params, type)
      {ref, device}
    else
      # (while a program is recorded, ops on real tensors make its
      # constants: each once, see memo_constant/2)
      memo_constant({name, inputs, params, type}, fn ->
        Call.defer(&Native.op(&1, name, inputs, params), type)
      end)
    end
  end

  # The largest constant from bytes a recording keeps by value.
  @memo_bytes 4096

  @doc """
  While a program is recorded, the result of `make.()` for `key`, made once;
  otherwise `make.()`. What a recording computes from real tensors alone
  becomes the program's constants, and every op is a function of its inputs
  and parameters, so one tensor serves every use: Nx.Random's threefry
  repeats the same few scalars, and an Axon LSTM's initializer made 200
  constants of 31 values, one NIF call and one worker job each.
  """
  def memo_constant(key, make) do
    case current_recording() do
      nil ->
        make.()

      %Recording{memo: %{^key => made}} ->
        made

      %Recording{memo: memo} = recording ->
        # (`make` runs real ops only: the recording is unchanged by it)
        made = make.()
        put_recording(%{recording | memo: Map.put(memo, key, made)})
        made
    end
  end

  @doc """
  Like `defer/4` for `name`, an op without tensor inputs (a creation) on
  `device` whose result takes `bytes`. While a program for `device` is
  recorded and the result is larger than a small constant, it is recorded
  at the program's top level as an instruction, made at each run, rather
  than as a constant: a program held in the cache would otherwise hold it
  between runs, and its one reader could not take its buffer over (a
  key/value cache written into zeros is then written in place, not
  copied). Inside a loop or branch it stays a constant, made once.
  """
  def defer_created(name, params, type, bytes, device) do
    case current_recording() do
      %Recording{device: ^device, depth: 0} when bytes > @memo_bytes ->
        [{ref, _shape, _type, device}] = record(name, [], params, type)
        {ref, device}

      _ ->
        defer(name, [], params, type)
    end
  end

  @doc "Like `defer/4`, for a result whose `type` and `shape` were predicted (ExMLX.Prediction)."
  def defer_exact(name, inputs, params, type, shape) do
    if recorded?(inputs),
      do: defer(name, inputs, params, type),
      else:
        memo_constant({name, inputs, params, type}, fn ->
          Call.deferred(Native.op({:deferred, type, shape}, name, inputs, params))
        end)
  end

  @doc "A tensor made from `binary` on `device`, queued without waiting: `{ref, device}`."
  def from_binary_deferred(binary, type, shape, device, cast) do
    make = fn -> Call.defer(&Native.from_binary(&1, binary, type, shape, device), cast) end

    # (a recording's small constants once each, as defer/4's)
    if byte_size(binary) <= @memo_bytes,
      do: memo_constant({:from_binary, binary, type, shape, device, cast}, make),
      else: make.() |> within_waiting_bound()
  end

  # The most bytes of binaries that from_binary_deferred/5 lets wait for a
  # worker (each binary stays alive until its copy is made): past it, the
  # caller waits for the tensor just made, and so for the copies queued
  # before it on that worker. Loading a model's parameters therefore holds
  # at most this much more host memory than the loader's own.
  @waiting_bound 256 * 1024 * 1024

  defp within_waiting_bound({ref, _device} = made) do
    if Native.from_binary_waiting_bytes() > @waiting_bound, do: Call.info(ref)
    made
  end

  @doc "The tensor on `device`: `{ref, shape, type, device}`."
  def transfer(ref, device) do
    case recorded_value(ref) do
      nil -> Call.run(&Native.transfer(&1, ref, device))
      {type, ^device} -> {ref, nil, type, device}
      _ -> unrecordable!("a transfer to another device")
    end
  end

  @doc "The tensor's bytes (row-major, little-endian)."
  def to_binary(ref), do: read(ref, "reading a tensor's data", &Native.to_binary(&1, ref))

  @doc "`{address, bytes}` of the tensor's data, which stays put while the tensor lives."
  def data_pointer(ref), do: read(ref, "a tensor's address", &Native.data_pointer(&1, ref))

  @doc "The only element, as an Elixir number."
  def item(ref), do: read(ref, "reading a number", &Native.item(&1, ref))

  # A NIF that reads `ref`'s data: there is none while recording.
  defp read(ref, what, nif) do
    if recorded_value(ref), do: unrecordable!(what)
    Call.run(nif)
  end

  @doc "Frees the tensor's data now: `true` if it had data."
  def deallocate(ref) do
    if recorded_value(ref), do: true, else: Native.deallocate(ref)
  end

  @doc """
  `{shape, type, device}`, waiting for a deferred tensor. Of a recorded
  value: `{nil, type, device}`, `type` being `nil` where MLX decides it.
  """
  def info(ref) do
    case recorded_value(ref) do
      nil -> Call.info(ref)
      {type, device} -> {nil, type, device}
    end
  end

  # ---------------------------------------------------------------------------
  # Recording programs (ExMLX.Compiler)
  # ---------------------------------------------------------------------------

  defmodule Unrecordable do
    @moduledoc false
    # Raised while recording a program at a step that needs data (a read, a
    # loop condition): the compiler then runs the function another way.
    defexception [:message]
  end

  # The recording in progress in this process, if any. It is the one piece
  # of recording state that is not passed as a value: Nx calls
  # ExMLX.Backend's callbacks (and they call run/3 and defer/4) with no
  # argument of ExMLX's own, so the recording they add to is found here.
  # Everything else takes and returns a %Recording{}.
  @recorder :ex_mlx_program_recorder

  defp current_recording, do: Process.get(@recorder)
  defp put_recording(%Recording{} = recording), do: Process.put(@recorder, recording)

  @doc """
  Records the ops `fun.(inputs)` runs on `inputs` (one new reference per
  input, standing for the program's input slots) on `device`: returns
  `{fun's result, recording}`; `program/3` turns the recording into the
  arguments of `ExMLX.Native.program_new/6`. Ops on real tensors only run
  for real (their results become constants); anything that needs data
  raises `ExMLX.Op.Unrecordable`.
  """
  def record_program(input_count, device, fun) do
    inputs = for _ <- 1..input_count//1, do: make_ref()

    recording = %Recording{
      device: device,
      values: Map.new(Enum.with_index(inputs), fn {ref, i} -> {ref, {{:in, i}, nil}} end)
    }

    previous = current_recording()
    put_recording(recording)

    try do
      result = fun.(inputs)
      {result, current_recording()}
    after
      if previous, do: put_recording(previous), else: Process.delete(@recorder)
    end
  end

  @doc """
  Records a `while` loop whose state starts as `initial` (references) of
  the storage `types`: `condition.(state)` returns `{predicate, carry}`
  (the predicate's reference and anything `body` needs from it),
  `body.(state, carry)` the next state's references, each recorded as a
  block of the loop. Returns the references of the loop's results (the
  final state). Slots are numbered as ex_mlx_core's programs number them:
  state, condition, body, results.
  """
  def record_while(initial, types, condition, body) do
    {initial_ids, state} = Enum.map_reduce(initial, current_recording(), &value_id/2)
    {state_refs, state} = new_values(state, types)
    put_recording(state)
    {condition_block, carry} = record_block(fn -> condition.(state_refs) end, &[&1])
    {body_block, _} = record_block(fn -> {body.(state_refs, carry), nil} end, & &1)
    push({:while, initial_ids, condition_block, body_block}, types)
  end

  @doc """
  Records a `cond`: `clauses` are `{predicate, body}` pairs of functions
  (`predicate.()` returns `{reference, carry}`, `body.(carry)` the list of
  result references), `last.()` the references of the last clause; every
  body gives results of the storage `types`. Returns the references of the
  results.
  """
  def record_cond(clauses, last, types) do
    clauses =
      Enum.map(clauses, fn {predicate, body} ->
        {predicate_block, carry} = record_block(predicate, &[&1])
        {body_block, _} = record_block(fn -> {body.(carry), nil} end, & &1)
        {predicate_block, body_block}
      end)

    {last_block, _} = record_block(fn -> {last.(), nil} end, & &1)
    push({:cond, clauses, last_block}, types)
  end

  @doc """
  The storage type of `ref`: the type a recorded value was given (`nil`
  where MLX decides it), else `stored`, the storage type its tensor's Nx
  type gives (the backend keeps every tensor in it: ExMLX.Backend's
  `storage_type/1`), so a tensor still being computed is not waited for.
  """
  def recorded_type(ref, stored) do
    case recorded_value(ref) do
      {type, _device} -> type
      nil -> stored
    end
  end

  # Runs `fun` (giving `{result, carry}`) with a new block of instructions:
  # `{{instructions, output_ids}, carry}`, the outputs being `outputs.(result)`.
  defp record_block(fun, outputs) do
    %Recording{instructions: outer, depth: depth} = current_recording()
    put_recording(%{current_recording() | instructions: [], depth: depth + 1})

    {result, carry} =
      try do
        fun.()
      rescue
        e ->
          put_recording(%{current_recording() | instructions: outer, depth: depth})
          reraise e, __STACKTRACE__
      end

    {ids, state} = Enum.map_reduce(outputs.(result), current_recording(), &value_id/2)
    put_recording(%{state | instructions: outer, depth: depth})
    {{Enum.reverse(state.instructions), ids}, carry}
  end

  # New values of `types`: their references and the state (most ops have
  # one result).
  defp new_values(%{values: values, results: r} = state, [type]) do
    ref = make_ref()
    {[ref], %{state | values: Map.put(values, ref, {{:res, r}, type}), results: r + 1}}
  end

  defp new_values(state, types) do
    refs = Enum.map(types, fn _ -> make_ref() end)

    values =
      refs
      |> Enum.zip(types)
      |> Enum.with_index(state.results)
      |> Enum.reduce(state.values, fn {{ref, type}, r}, acc ->
        Map.put(acc, ref, {{:res, r}, type})
      end)

    {refs, %{state | values: values, results: state.results + length(refs)}}
  end

  # Appends a loop or branch whose results are values of `types`.
  defp push(instruction, types) do
    {refs, state} = new_values(current_recording(), types)
    put_recording(%{state | instructions: [instruction | state.instructions]})
    refs
  end

  @doc """
  The indices (ascending) of the inputs a recording's instructions and
  `outputs` (references) read: the inputs its program needs.
  """
  def read_inputs(state, outputs) do
    {_ids, state} = Enum.map_reduce(outputs, state, &value_id/2)
    Enum.sort(state.read_inputs)
  end

  @doc """
  The program of a recording (`record_program/3`) whose outputs are `outputs`
  (references): `{inputs, constants, instructions, output_slots}` with
  slots numbered as ex_mlx_core's programs number them (inputs, then
  constants, then results in order). `inputs` is the recording's input
  count, or the indices (ascending) of the inputs the program reads: the
  program's inputs are then those alone, in that order (`read_inputs/2`).
  """
  def program(state, inputs, outputs) when is_integer(inputs),
    do: program(state, Enum.to_list(0..(inputs - 1)//1), outputs)

  def program(state, used_inputs, outputs) when is_list(used_inputs) do
    {output_ids, state} = Enum.map_reduce(outputs, state, &value_id/2)
    constants = state.constants |> Enum.sort_by(fn {_ref, j} -> j end) |> Enum.map(&elem(&1, 0))
    input_slots = used_inputs |> Enum.with_index() |> Map.new()
    input_count = map_size(input_slots)
    base = input_count + length(constants)

    slot = fn
      {:in, i} -> Map.fetch!(input_slots, i)
      {:const, j} -> input_count + j
      {:res, r} -> base + r
    end

    instructions = state.instructions |> Enum.reverse() |> Enum.map(&slots(&1, slot))
    {input_count, constants, instructions, Enum.map(output_ids, slot)}
  end

  defp slots({:while, initial, condition, body}, slot),
    do: {:while, Enum.map(initial, slot), block_slots(condition, slot), block_slots(body, slot)}

  defp slots({:cond, clauses, last}, slot) do
    clauses = Enum.map(clauses, fn {p, b} -> {block_slots(p, slot), block_slots(b, slot)} end)
    {:cond, clauses, block_slots(last, slot)}
  end

  defp slots({name, ids, params, cast, count}, slot),
    do: {name, Enum.map(ids, slot), params, cast, count}

  defp block_slots({instructions, outputs}, slot),
    do: {Enum.map(instructions, &slots(&1, slot)), Enum.map(outputs, slot)}

  @doc """
  Whether an op on `inputs` (references) would be recorded into the program
  being recorded (`record_program/3`) rather than run.
  """
  def recording?(inputs), do: recorded?(inputs)

  defp recorded?(inputs) do
    case current_recording() do
      nil -> false
      %Recording{values: values} -> Enum.any?(inputs, &is_map_key(values, &1))
    end
  end

  defp recorded_value(ref) do
    case current_recording() do
      %Recording{values: %{^ref => {_id, type}}, device: device} -> {type, device}
      _ -> nil
    end
  end

  defp unrecordable!(what), do: raise(Unrecordable, message: "#{what} needs data at run time")

  # Records op `name`: its results become new values, cast to `cast`.
  defp record(name, inputs, params, cast) do
    {ids, state} = Enum.map_reduce(inputs, current_recording(), &value_id(&1, &2))
    count = length(ExMLX.OpTable.fetch!(name).results)
    type = if cast == :any, do: nil, else: cast
    {refs, state} = new_values(state, List.duplicate(type, count))

    instruction = {name, ids, params, cast, count}
    put_recording(%{state | instructions: [instruction | state.instructions]})

    Enum.map(refs, &{&1, nil, type, state.device})
  end

  # The id of a value: a recorded one's, or a real tensor's as a constant.
  defp value_id(ref, %{values: values, constants: constants} = state) do
    case values do
      %{^ref => {{:in, i} = id, _type}} ->
        {id, %{state | read_inputs: MapSet.put(state.read_inputs, i)}}

      %{^ref => {id, _type}} ->
        {id, state}

      _ ->
        case constants do
          %{^ref => j} ->
            {{:const, j}, state}

          _ ->
            j = map_size(constants)
            {{:const, j}, %{state | constants: Map.put(constants, ref, j)}}
        end
    end
  end
end
