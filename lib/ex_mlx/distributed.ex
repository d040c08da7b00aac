defmodule ExMLX.Distributed do
  @moduledoc """
  MLX's distributed engine: a group of OS processes (ranks), possibly on
  several machines, and the collectives between them (`all_sum/2`,
  `all_gather/2`, `all_max/2`, `all_min/2`, `send/3`, `recv/4`,
  `recv_like/3`).

  The setup is MLX's. Each rank is an OS process that knows its rank and a
  *hostfile*: a JSON list with, for each rank in order, the `"ip:port"`
  addresses it listens on (`[["127.0.0.1:38001"], ["127.0.0.1:38002"]]`).
  MLX reads both from the environment (`MLX_RANK`, `MLX_HOSTFILE`), which
  `mix ex_mlx.launch` sets for every rank it starts; `init/1` can also take
  them as options. Then:

      group = ExMLX.Distributed.init(backend: :ring)
      ExMLX.Distributed.all_sum(ExMLX.full(group.rank + 1, {:f, 32}, {3}))
      #=> on every rank, 1 + 2 + ... + size in each element

  Without `init/1` (or when the backend finds no setup and `strict: false`)
  the collectives act on a group of one, as MLX's do: the reductions and
  the gather return their input, and `send/3` and `recv/4` are refused.

      iex> ExMLX.Distributed.group().size
      1
      iex> t = ExMLX.Distributed.all_sum(ExMLX.iota({:s, 32}, {3}))
      iex> ExMLX.to_list(t)
      [0, 1, 2]

  ## Backends

  `:ring` (TCP between neighbours; what MLX's Linux CPU build has), `:mpi`,
  `:nccl` (GPUs), and `:any` (the ring if `MLX_RANK` and `MLX_HOSTFILE` are
  set, else NCCL if `NCCL_HOST_IP` is and the build has it, else MPI). A
  backend the MLX build lacks is an `ExMLX.Error` of kind
  `:distributed` that names it; `available?/1` tells beforehand. MLX's ring
  exchanges with its two neighbours only: `send/3` and `recv/4` to another
  rank are refused, and it cannot `split/3` a group.

  ## Failures and timeouts

  Every call that waits for peers (`init/1`, the collectives, `split/3`)
  waits at most its `:timeout` (milliseconds; `init/1`'s option sets the
  default of the group's calls, itself 60 000 unless the application
  environment's `:distributed_timeout` says otherwise). What MLX 0.32.2
  does by itself (docs/distributed.md): a peer that dies mid-collective
  makes the others' collective fail with MLX's message ("[ring] connection
  to a peer was lost"), an `ExMLX.Error` of kind `:distributed`. What it
  does not bound: a peer missing at init (the rank that accepts first waits
  forever), and a peer that is alive but never joins a collective. There
  the timeout is the watchdog: the call raises an `ExMLX.Error` of kind
  `:timeout`. MLX cannot cancel the stuck work, so from then on every
  distributed call of this OS process fails at once (kind `:distributed`,
  naming the timeout); the rank should exit, and the launcher stops the
  others.

  ## Where the work runs

  A collective evaluates its input on the input's device worker, then runs
  on ExMLX's communication thread, in a CPU stream of its own (a GPU one for
  NCCL): a collective that waits for its peers holds no BEAM scheduler and
  does not hold up other operations of the device. Collectives run one at a
  time, in the order they were called; every rank must call them in the
  same order.
  """

  alias ExMLX.{Native, Tensor}

  defmodule Group do
    @moduledoc """
    A distributed group: `:rank` (this process's, from 0), `:size` and
    `:backend` (`:ring`, `:mpi`, `:nccl`, or `:none` for the group of one,
    whose `:ref` is nil). `:timeout` is the default wait of its calls, in
    milliseconds.
    """
    @enforce_keys [:ref, :rank, :size, :backend, :timeout]
    defstruct [:ref, :rank, :size, :backend, :timeout]

    @type t :: %__MODULE__{
            ref: reference() | nil,
            rank: non_neg_integer(),
            size: pos_integer(),
            backend: :ring | :mpi | :nccl | :none,
            timeout: timeout()
          }
  end

  @type backend :: :any | :ring | :mpi | :nccl
  @type hostfile :: Path.t() | [[String.t()]]

  @key {__MODULE__, :group}

  @doc """
  Whether this MLX build has `backend` (`:any`: any of them).

      iex> ExMLX.Distributed.available?(:ring)
      true
  """
  @spec available?(backend()) :: boolean()
  def available?(backend \\ :any), do: Native.dist_available(backend) |> ExMLX.Call.value()

  @doc """
  Joins the group of `backend` and makes it the default group of this OS
  process's calls. Waits until every rank has joined, at most `:timeout`.

  Options:

    * `:backend` - `:any` (default), `:ring`, `:mpi` or `:nccl`
    * `:strict` - if `true`, a backend that finds no setup (no `MLX_RANK`
      and `MLX_HOSTFILE` for the ring) is an error; if `false` (default),
      the group of one is returned, as in MLX
    * `:hostfile` - the hostfile: a path, or the list itself (then written to
      a temporary file); sets `MLX_HOSTFILE`
    * `:rank` - this process's rank; sets `MLX_RANK`
    * `:timeout` - milliseconds to wait for the group, and the default wait
      of the group's calls

  MLX keeps one group per backend for the life of the OS process: a second
  call returns the same group. A backend this MLX build lacks is an error
  that says so; MLX's CPU build has the ring only:

      ExMLX.Distributed.init(backend: :nccl, strict: true)
      ** (ExMLX.Error) the nccl backend is not available in this MLX build (MLX 0.32.2); available: ring
  """
  @spec init(keyword()) :: Group.t()
  def init(opts \\ []) do
    opts =
      Keyword.validate!(opts,
        backend: :any,
        strict: false,
        hostfile: nil,
        rank: nil,
        timeout: default_timeout()
      )

    timeout = opts[:timeout]

    if hostfile = opts[:hostfile], do: put_env("MLX_HOSTFILE", hostfile_path(hostfile))
    if rank = opts[:rank], do: put_env("MLX_RANK", Integer.to_string(rank))

    {ref, rank, size, backend} =
      await("init (backend #{inspect(opts[:backend])})", timeout, fn tag ->
        Native.dist_init(tag, opts[:backend], opts[:strict])
      end)

    group = %Group{ref: ref, rank: rank, size: size, backend: backend, timeout: timeout}
    group = if backend == :none, do: %{group | ref: nil}, else: group
    :persistent_term.put(@key, group)
    group
  end

  # MLX reads the C library's environment; System.put_env/2 changes the
  # emulator's copy only (kept too, for System.get_env/1)
  defp put_env(name, value) do
    :ok = Native.dist_setenv(name, value) |> ExMLX.Call.value()
    System.put_env(name, value)
  end

  @doc """
  The default group: the one `init/1` returned, or the group of one.
  """
  @spec group() :: Group.t()
  def group do
    :persistent_term.get(@key, nil) ||
      %Group{ref: nil, rank: 0, size: 1, backend: :none, timeout: default_timeout()}
  end

  @doc "This process's rank in `group` (default: `group/0`)."
  @spec rank(Group.t()) :: non_neg_integer()
  def rank(%Group{rank: rank} \\ group()), do: rank

  @doc "The number of ranks of `group` (default: `group/0`)."
  @spec size(Group.t()) :: pos_integer()
  def size(%Group{size: size} \\ group()), do: size

  @doc """
  Splits `group` into groups of the ranks that pass the same `color`,
  ordered by `:key` (default: their rank). The ring backend cannot split.
  """
  @spec split(Group.t(), integer(), keyword()) :: Group.t()
  def split(%Group{} = group, color, opts \\ []) do
    opts = Keyword.validate!(opts, key: -1, timeout: group.timeout)

    {ref, rank, size, backend} =
      await("split", opts[:timeout], &Native.dist_split(&1, group.ref, color, opts[:key]))

    %Group{ref: ref, rank: rank, size: size, backend: backend, timeout: opts[:timeout]}
  end

  @doc """
  The element-wise sum of `tensor` over the ranks, on every rank.

  Options (here and for every collective): `:group` (default `group/0`)
  and `:timeout` (default: the group's).
  """
  @spec all_sum(Tensor.t(), keyword()) :: Tensor.t()
  def all_sum(tensor, opts \\ []), do: collective(:all_sum, tensor!(tensor), opts)

  @doc "The element-wise maximum of `tensor` over the ranks, on every rank."
  @spec all_max(Tensor.t(), keyword()) :: Tensor.t()
  def all_max(tensor, opts \\ []), do: collective(:all_max, tensor!(tensor), opts)

  @doc "The element-wise minimum of `tensor` over the ranks, on every rank."
  @spec all_min(Tensor.t(), keyword()) :: Tensor.t()
  def all_min(tensor, opts \\ []), do: collective(:all_min, tensor!(tensor), opts)

  @doc """
  Every rank's `tensor`, concatenated along the first axis in rank order
  (a scalar becomes a vector of one element per rank), on every rank.
  """
  @spec all_gather(Tensor.t(), keyword()) :: Tensor.t()
  def all_gather(tensor, opts \\ []), do: collective(:all_gather, tensor!(tensor), opts)

  defp collective(op, tensor, opts) do
    {group, timeout} = group_opts(opts)

    await(
      "#{op} of #{inspect(tensor)}",
      timeout,
      &Native.dist_collective(&1, op, tensor.ref, group.ref)
    )
    |> Tensor.wrap()
  end

  @doc """
  Sends `tensor` to rank `dst`, returning once it is sent. The ring backend
  sends to its neighbours only. MLX 0.32's NCCL backend has no point-to-point
  transfer: in an NCCL group of two ranks, a send and its matching `recv/4`
  travel together as one `all_gather` (the receiver keeps the sender's part,
  bit for bit); in a larger NCCL group they raise an `ExMLX.Error` of kind
  `:argument`, and the group stays usable.
  """
  @spec send(Tensor.t(), non_neg_integer(), keyword()) :: :ok
  def send(tensor, dst, opts \\ []) do
    tensor = tensor!(tensor)
    {group, timeout} = group_opts(opts)

    if nccl_peer?(group, dst) do
      # (the pair's all_gather: see nccl_peer?/2)
      _ = all_gather(tensor, group: group, timeout: timeout) |> ExMLX.eval()
      :ok
    else
      await(
        "send to rank #{inspect(dst)}",
        timeout,
        &Native.dist_send(&1, tensor.ref, dst, group.ref)
      )
    end
  end

  @doc """
  A tensor of `shape` and `type` received from rank `src`. Options: those of
  the collectives, and `:device` (default `:cpu`).
  """
  @spec recv(tuple(), Tensor.type(), non_neg_integer(), keyword()) :: Tensor.t()
  def recv(shape, type, src, opts \\ []) do
    {device, opts} = Keyword.pop(opts, :device, :cpu)
    {group, timeout} = group_opts(opts)

    if nccl_peer?(group, src) do
      nccl_recv(shape, type, src, device, group, timeout)
    else
      await("recv from rank #{inspect(src)}", timeout, fn tag ->
        Native.dist_recv(tag, shape, type, src, group.ref, device)
      end)
      |> Tensor.wrap()
    end
  end

  @doc "A tensor like `tensor` (shape, type, device) received from rank `src`."
  @spec recv_like(Tensor.t(), non_neg_integer(), keyword()) :: Tensor.t()
  def recv_like(tensor, src, opts \\ []) do
    tensor = tensor!(tensor)
    {group, timeout} = group_opts(opts)

    if nccl_peer?(group, src) do
      nccl_recv(
        ExMLX.shape(tensor),
        ExMLX.type(tensor),
        src,
        ExMLX.device(tensor),
        group,
        timeout
      )
    else
      await(
        "recv from rank #{inspect(src)}",
        timeout,
        &Native.dist_recv_like(&1, tensor.ref, src, group.ref)
      )
      |> Tensor.wrap()
    end
  end

  # MLX 0.32's NCCL backend has no point-to-point transfer (its CUDA build
  # raises "Send has no CUDA implementation"). In a group of two, a send and
  # the matching recv are one all_gather, of which the receiver keeps the
  # sender's part, bit for bit (nothing is added to it). In a larger group
  # the other ranks would have to join, so send and recv are refused there,
  # before anything reaches MLX (the group stays usable). A peer that is not
  # another rank of the group is left to the native call, which names it.
  defp nccl_peer?(%Group{backend: :nccl, size: size, rank: rank}, peer)
       when is_integer(peer) and peer >= 0 and peer < size and peer != rank do
    if size != 2 do
      raise ExMLX.Error,
        kind: :argument,
        message:
          "send and recv on an NCCL group of #{size} ranks: MLX 0.32's NCCL backend has " <>
            "no point-to-point transfer, which ExMLX carries through all_gather in a group " <>
            "of two only; use the collectives, or a ring group (backend: :ring)"
    end

    true
  end

  defp nccl_peer?(_group, _peer), do: false

  defp nccl_recv(shape, type, src, device, group, timeout) do
    zeros = ExMLX.full(0, type, shape, device: device)
    gathered = all_gather(zeros, group: group, timeout: timeout)

    case shape do
      {} ->
        gathered |> ExMLX.dynamic_slice([src], [1]) |> ExMLX.reshape({})

      _ ->
        [rows | rest] = Tuple.to_list(shape)
        starts = [src * rows | Enum.map(rest, fn _ -> 0 end)]
        ExMLX.dynamic_slice(gathered, starts, [rows | rest])
    end
  end

  defp tensor!(%Tensor{} = t), do: t

  defp tensor!(other),
    do: raise(ArgumentError, "tensor: expected an ExMLX.Tensor, got: #{inspect(other)}")

  defp group_opts(opts) do
    opts = Keyword.validate!(opts, [:group, :timeout])
    group = opts[:group] || group()
    {group, opts[:timeout] || group.timeout}
  end

  # ---------------------------------------------------------------------------
  # Data-parallel training
  # ---------------------------------------------------------------------------

  @batch_bytes 32 * 1024 * 1024

  @doc """
  The average over the ranks of every tensor in `gradients`: a map, list or
  tuple (nested freely) of `ExMLX.Tensor`s or, with Nx, `Nx.Tensor`s (an
  Axon model's parameters are such a map). Returns the same container with
  the averages, each of its tensor's shape and type.

  As MLX's `average_gradients` does, the tensors are not reduced one by one:
  those of one type are flattened and concatenated into buffers of at most
  `:batch_bytes` (default 32 MB; a larger tensor goes alone), and each
  buffer takes one `all_sum/2`, then is divided by the group's size and
  split back. Types are never mixed in a buffer, so nothing is converted.
  Only floating-point and complex tensors can be averaged (an integer
  average is not an integer); others raise `ArgumentError`.

  On the group of one, `gradients` comes back unchanged.

  Options: `:group`, `:timeout` (per collective), `:batch_bytes`.

      iex> g = %{w: ExMLX.full(0.5, {:f, 32}, {2, 2}), b: [ExMLX.full(1.0, {:bf, 16}, {3})]}
      iex> avg = ExMLX.Distributed.average_gradients(g)
      iex> {ExMLX.to_list(avg.w), ExMLX.to_list(hd(avg.b))}
      {[0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0]}
  """
  @spec average_gradients(term(), keyword()) :: term()
  def average_gradients(gradients, opts \\ []) do
    {batch_bytes, opts} = Keyword.pop(opts, :batch_bytes, @batch_bytes)
    {group, timeout} = group_opts(opts)

    unless is_integer(batch_bytes) and batch_bytes > 0,
      do:
        raise(
          ArgumentError,
          "batch_bytes: expected a positive integer, got: #{inspect(batch_bytes)}"
        )

    {leaves, rebuild} = flatten(gradients)

    for %Tensor{type: type} = t <- leaves, not float_type?(type) do
      raise ArgumentError,
            "average_gradients: #{inspect(t)} is not floating-point or complex; " <>
              "an average of #{inspect(type)} values is not one"
    end

    if group.size == 1 do
      gradients
    else
      averaged =
        leaves
        |> Enum.with_index()
        |> Enum.group_by(fn {t, _} -> {t.type, t.device} end)
        |> Enum.flat_map(fn {_, indexed} ->
          indexed
          |> batches(batch_bytes)
          |> Enum.flat_map(&average_batch(&1, group, timeout))
        end)
        |> Enum.sort_by(fn {_, i} -> i end)
        |> Enum.map(fn {t, _} -> t end)

      rebuild.(averaged)
    end
  end

  defp float_type?({kind, _}), do: kind in [:f, :bf, :c]
  defp float_type?(_), do: false

  defp elements(%Tensor{shape: shape}), do: shape |> Tuple.to_list() |> Enum.product()

  defp bytes(%Tensor{type: {_, bits}} = t), do: div(elements(t) * bits, 8)

  # Consecutive tensors in buffers of at most `limit` bytes.
  defp batches(indexed, limit) do
    indexed
    |> Enum.chunk_while(
      {[], 0},
      fn {t, _} = item, {batch, size} ->
        b = bytes(t)

        cond do
          batch == [] -> {:cont, {[item], b}}
          size + b <= limit -> {:cont, {[item | batch], size + b}}
          true -> {:cont, Enum.reverse(batch), {[item], b}}
        end
      end,
      fn
        {[], _} -> {:cont, {[], 0}}
        {batch, _} -> {:cont, Enum.reverse(batch), {[], 0}}
      end
    )
  end

  # One all_sum for the batch, then each tensor's part, divided by the size.
  defp average_batch([{t, i}], group, timeout),
    do: [{t |> all_sum(group: group, timeout: timeout) |> divide_by(group.size), i}]

  defp average_batch(batch, group, timeout) do
    flat = ExMLX.concatenate(Enum.map(batch, fn {t, _} -> ExMLX.reshape(t, {elements(t)}) end))
    avg = flat |> all_sum(group: group, timeout: timeout) |> divide_by(group.size)

    {parts, _} =
      Enum.map_reduce(batch, 0, fn {t, i}, offset ->
        n = elements(t)
        part = avg |> ExMLX.slice([offset], [offset + n]) |> ExMLX.reshape(t.shape)
        {{part, i}, offset + n}
      end)

    parts
  end

  defp divide_by(%Tensor{type: type, device: device} = t, n),
    do: ExMLX.divide(t, ExMLX.full(n, type, {}, device: device))

  # The tensors of a container, in a fixed order, as ExMLX tensors, and the
  # function that puts new ones in their places.
  defp flatten(container) do
    leaves = container |> leaves([]) |> Enum.reverse()

    rebuild = fn values ->
      {rebuilt, []} = replace(container, values)
      rebuilt
    end

    {leaves, rebuild}
  end

  defp leaves(%Tensor{} = t, acc), do: [t | acc]
  defp leaves(%{__struct__: Nx.Tensor} = t, acc), do: [from_nx(t) | acc]

  defp leaves(%{__struct__: _} = other, _acc),
    do:
      raise(
        ArgumentError,
        "average_gradients: expected tensors in maps, lists and tuples, got: #{inspect(other)}"
      )

  defp leaves(map, acc) when is_map(map),
    do: map |> Map.to_list() |> Enum.reduce(acc, fn {_, v}, a -> leaves(v, a) end)

  defp leaves(list, acc) when is_list(list), do: Enum.reduce(list, acc, &leaves/2)
  defp leaves(tuple, acc) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> leaves(acc)

  defp leaves(other, _acc),
    do:
      raise(
        ArgumentError,
        "average_gradients: expected tensors in maps, lists and tuples, got: #{inspect(other)}"
      )

  defp replace(%Tensor{}, [t | rest]), do: {t, rest}
  defp replace(%{__struct__: Nx.Tensor}, [t | rest]), do: {to_nx(t), rest}

  defp replace(map, values) when is_map(map) do
    {pairs, rest} =
      map
      |> Map.to_list()
      |> Enum.map_reduce(values, fn {k, v}, vs ->
        {new, vs} = replace(v, vs)
        {{k, new}, vs}
      end)

    {Map.new(pairs), rest}
  end

  defp replace(list, values) when is_list(list), do: Enum.map_reduce(list, values, &replace/2)

  defp replace(tuple, values) when is_tuple(tuple) do
    {list, rest} = replace(Tuple.to_list(tuple), values)
    {List.to_tuple(list), rest}
  end

  # (ExMLX.Backend exists only when Nx does)
  defp from_nx(t), do: apply(ExMLX.Backend, :from_nx, [t])
  defp to_nx(t), do: apply(ExMLX.Backend, :to_nx, [t])

  # ---------------------------------------------------------------------------
  # Between BEAM nodes (Erlang distribution, no MLX networking)
  # ---------------------------------------------------------------------------

  @doc """
  Sends `tensor` (an `ExMLX.Tensor`, or an `Nx.Tensor` with Nx) to `dest`
  (a pid, a registered name, or `{name, node}` on another BEAM node) as the
  message `{tag, frame}`, `frame` being its `ExMLX.Wire` frame: for
  clusters that have Erlang distribution but not MLX's networking.
  `receive_tensor/2` on the other side makes the tensor again, bit for bit.

  Copies: the data is copied once into the frame (with its checksum, in the
  same pass). The frame is a reference-counted binary, so the BEAM passes it
  on without copying it (to a process on this node, it is shared; to another
  node, the distribution writes it to its connection). The receiver copies
  it once into an MLX buffer: MLX must own its tensors' memory, since it may
  write a result into an input's buffer when nothing else holds that input.

      iex> :ok = ExMLX.Distributed.send_tensor(self(), ExMLX.iota({:bf, 16}, {3}))
      iex> t = ExMLX.Distributed.receive_tensor()
      iex> {t.type, ExMLX.to_list(t)}
      {{:bf, 16}, [0.0, 1.0, 2.0]}
  """
  @spec send_tensor(Process.dest(), Tensor.t() | struct(), term()) :: :ok
  def send_tensor(dest, tensor, tag \\ :ex_mlx_tensor) do
    frame = ExMLX.Wire.encode(tensor)
    Kernel.send(dest, {tag, frame})
    :ok
  end

  @doc """
  Waits for a tensor that `send_tensor/3` sent to this process with `tag`
  and decodes it (checking its checksum). Raises `ExMLX.Error` of kind
  `:timeout` if none comes within `:timeout` milliseconds (default
  `:infinity`), or the wire format's error for a malformed frame.

  Options: `:tag` (default `:ex_mlx_tensor`), `:timeout`, and
  `ExMLX.Wire.decode/2`'s (`:device`, `as: :nx`).
  """
  @spec receive_tensor(keyword()) :: Tensor.t() | struct()
  def receive_tensor(opts \\ []) do
    {tag, opts} = Keyword.pop(opts, :tag, :ex_mlx_tensor)
    {timeout, opts} = Keyword.pop(opts, :timeout, :infinity)

    receive do
      {^tag, frame} when is_binary(frame) -> ExMLX.Wire.decode!(frame, opts)
    after
      timeout ->
        raise ExMLX.Error,
          kind: :timeout,
          message: "no tensor tagged #{inspect(tag)} came within #{timeout} ms"
    end
  end

  # ---------------------------------------------------------------------------
  # Hostfiles
  # ---------------------------------------------------------------------------

  @doc """
  A loopback hostfile for `n` ranks on this machine: one free
  `"127.0.0.1:port"` per rank (ports the system had free a moment ago).

      iex> [[a], [b]] = ExMLX.Distributed.loopback_hostfile(2)
      iex> a != b and String.starts_with?(a, "127.0.0.1:")
      true
  """
  @spec loopback_hostfile(pos_integer()) :: [[String.t()]]
  def loopback_hostfile(n) when is_integer(n) and n > 0 do
    sockets =
      for _ <- 1..n do
        {:ok, socket} = :gen_tcp.listen(0, ip: {127, 0, 0, 1}, reuseaddr: true)
        socket
      end

    ports = Enum.map(sockets, fn s -> s |> :inet.port() |> elem(1) end)
    Enum.each(sockets, &:gen_tcp.close/1)
    Enum.map(ports, &["127.0.0.1:#{&1}"])
  end

  @doc """
  The hostfile as MLX reads it (JSON), from its list form.

      iex> ExMLX.Distributed.hostfile_json([["127.0.0.1:38001"], ["127.0.0.1:38002"]])
      ~s([["127.0.0.1:38001"],["127.0.0.1:38002"]])
  """
  @spec hostfile_json([[String.t()]]) :: String.t()
  def hostfile_json(hosts) when is_list(hosts) do
    rank = fn addresses -> "[" <> Enum.map_join(addresses, ",", &json_string/1) <> "]" end
    "[" <> Enum.map_join(hosts, ",", rank) <> "]"
  end

  @doc """
  Reads a hostfile (MLX's JSON: a list, per rank, of `"ip:port"` strings).
  Raises `ArgumentError` naming what is wrong.
  """
  @spec read_hostfile(Path.t()) :: [[String.t()]]
  def read_hostfile(path) do
    text = File.read!(path)

    case Regex.scan(~r/\[\s*((?:"[^"]*"\s*,?\s*)*)\]/, text) do
      [] ->
        raise ArgumentError, "#{path}: expected a JSON list of lists of \"ip:port\" strings"

      ranks ->
        for [_, inner] <- ranks do
          for [_, address] <- Regex.scan(~r/"([^"]*)"/, inner) do
            unless address =~ ~r/^[^:\s]+:\d+$/,
              do: raise(ArgumentError, "#{path}: #{inspect(address)} is not \"ip:port\"")

            address
          end
        end
    end
  end

  defp json_string(s) do
    unless s =~ ~r/^[^"\\\x00-\x1f]*$/,
      do: raise(ArgumentError, "hostfile address #{inspect(s)} has characters JSON would escape")

    ~s("#{s}")
  end

  defp hostfile_path(path) when is_binary(path), do: path

  defp hostfile_path(hosts) when is_list(hosts) do
    path =
      Path.join(System.tmp_dir!(), "ex_mlx_hostfile_#{System.unique_integer([:positive])}.json")

    File.write!(path, hostfile_json(hosts))
    path
  end

  # ---------------------------------------------------------------------------
  # Waiting for a reply, with the watchdog
  # ---------------------------------------------------------------------------

  @doc false
  def default_timeout, do: Application.get_env(:ex_mlx, :distributed_timeout, 60_000)

  # Calls `nif.(tag)`, which returns {:ok, ticket} and replies {tag, result}
  # later; waits at most `timeout` ms for the reply.
  defp await(what, timeout, nif) do
    tag = make_ref()

    case nif.(tag) do
      {:ok, ticket} ->
        receive do
          {^tag, result} -> unwrap(result)
        after
          timeout -> give_up(what, timeout, tag, ticket)
        end

      {:error, reason} ->
        raise ExMLX.Error.from_reason(reason)
    end
  end

  defp give_up(what, timeout, tag, ticket) do
    reason = "#{what} did not finish within #{timeout} ms"

    if Native.dist_abandon(ticket, reason) do
      raise ExMLX.Error,
        kind: :timeout,
        message:
          reason <>
            " (a peer that is missing, stopped or too slow); MLX cannot cancel it, " <>
            "so distributed calls are disabled in this OS process from now on"
    else
      # (the reply was sent meanwhile)
      receive do
        {^tag, result} -> unwrap(result)
      end
    end
  end

  defp unwrap({:ok, value}), do: value
  defp unwrap({:error, reason}), do: raise(ExMLX.Error.from_reason(reason))
end
