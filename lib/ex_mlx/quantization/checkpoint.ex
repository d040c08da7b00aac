if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Quantization.Checkpoint do
    @moduledoc false
    # A model folder in mlx-community's layout (mlx-lm's `convert -q`)
    # loaded into a Bumblebee model with its quantized layers kept quantized
    # (ExMLX.Quantization.load_model/2, decision 0013).
    #
    # The folder: config.json with "quantization": {"bits", "group_size",
    # "mode"} (entries named by a layer's path override it for that layer,
    # `false` leaves the layer plain), safetensors files where a quantized
    # layer `P` is `P.weight` (uint32, each row's values packed into 32-bit
    # words), `P.scales` and `P.biases` (one per group of a row).
    #
    # Every tensor's header is checked before any tensor is read, so a bad
    # folder raises having loaded nothing. Bumblebee's own params loader then
    # maps the checkpoint's names to the model's layers (the same mapping
    # as `Bumblebee.load_model/2`), given a state where each quantized layer
    # is one tensor of its logical shape `{out, in}`: a dense layer's kernel
    # is its transpose, which the backend keeps as a flag
    # (ExMLX.Backend.transpose/3), and split fused layers are slices of its
    # rows (reshape/3, slice/5).

    alias ExMLX.Quantization

    defmodule Entry do
      @moduledoc false
      # A tensor of the state given to Bumblebee's loader, read when the
      # loader asks for it (Nx.LazyContainer): `load` returns it.
      defstruct [:template, :load]
    end

    defimpl Nx.LazyContainer, for: Entry do
      def traverse(%Entry{template: template, load: load}, acc, fun),
        do: fun.(template, load, acc)
    end

    @doc false
    def load_model(repository, opts) do
      opts =
        Keyword.validate!(opts, [
          :type,
          :module,
          :architecture,
          :spec_overrides,
          :log_params_diff,
          device: ExMLX.default_device()
        ])

      require_bumblebee!()
      dir = local_dir!(repository)
      config = read_config!(dir)
      formats = formats!(config)
      files = weight_files!(dir)

      headers =
        Map.new(files, fn file ->
          case ExMLX.Wire.read_bundle_header(file) do
            {:ok, header} -> {file, header}
            {:error, reason} -> raise ArgumentError, "#{file}: #{describe_error(reason)}"
          end
        end)

      layers = quantized_layers!(headers, formats)
      type = model_type!(layers, opts[:type])

      spec = spec!(repository, opts)
      model = apply(Bumblebee, :build_model, [spec, [type: type]])

      device = opts[:device]
      # (each quantized layer's counter: how many parameters took it)
      indices = layers |> Map.keys() |> Enum.sort() |> Enum.with_index(1)
      used = :counters.new(max(map_size(layers), 1), [])
      state = state(headers, layers, type, device, {used, Map.new(indices)})

      params =
        apply(Bumblebee.Conversion.PyTorchParams, :load_params!, [
          model,
          spec.__struct__.input_template(spec),
          [dir],
          [
            params_mapping:
              apply(Bumblebee.HuggingFace.Transformers.Model, :params_mapping, [spec]),
            loader_fun: fn _dir -> state end,
            backend: {ExMLX.Backend, device: device}
          ] ++ Keyword.take(opts, [:log_params_diff])
        ])

      check_used!(indices, used, params)
      # (the converted parameters computed: they let go of their sources)
      {:ok, %{model: model, params: ExMLX.Params.eval(params), spec: spec}}
    end

    defp require_bumblebee! do
      loaded? =
        Enum.all?(
          [Bumblebee, Bumblebee.Conversion.PyTorchParams, Jason],
          &Code.ensure_loaded?/1
        ) and function_exported?(Bumblebee.Conversion.PyTorchParams, :load_params!, 4)

      unless loaded?,
        do:
          raise(
            ArgumentError,
            "ExMLX.Quantization.load_model/2 loads Bumblebee models: add {:bumblebee, \"~> 0.7.0\"} " <>
              "to your dependencies"
          )
    end

    defp local_dir!({:local, dir}) when is_binary(dir) do
      unless File.dir?(dir), do: raise(ArgumentError, "#{dir}: no such folder")
      dir
    end

    defp local_dir!(other),
      do:
        raise(
          ArgumentError,
          "expected {:local, folder} (a model folder on disk; download a Hub repository " <>
            "first, e.g. with huggingface-cli), got: #{inspect(other)}"
        )

    defp read_config!(dir) do
      path = Path.join(dir, "config.json")

      case File.read(path) do
        {:ok, text} -> apply(Jason, :decode!, [text])
        {:error, reason} -> raise ArgumentError, "#{path}: #{:file.format_error(reason)}"
      end
    end

    # The folder's default format and the layers' own: %{default: {bits,
    # group_size}, layers: %{path => {bits, group_size} | false}}
    defp formats!(config) do
      quantization = config["quantization"] || config["quantization_config"]

      unless is_map(quantization),
        do:
          raise(
            ArgumentError,
            "config.json has no \"quantization\" entry: not a quantized folder " <>
              "(Bumblebee.load_model/2 loads plain ones)"
          )

      case Map.get(quantization, "mode", "affine") do
        "affine" ->
          :ok

        mode ->
          raise ArgumentError,
                "config.json: quantization mode #{inspect(mode)} is not supported " <>
                  "(ExMLX loads MLX's \"affine\" mode)"
      end

      default = format!("config.json's \"quantization\"", quantization)

      layers =
        for {path, value} <- quantization,
            path not in ["bits", "group_size", "mode"],
            into: %{} do
          case value do
            false -> {path, false}
            %{} -> {path, format!("config.json's \"quantization\" for #{path}", value)}
            _other -> {path, :ignored}
          end
        end

      %{default: default, layers: Map.reject(layers, fn {_, v} -> v == :ignored end)}
    end

    defp format!(where, %{"bits" => bits, "group_size" => group_size}) do
      %{bits: all_bits, group_sizes: group_sizes} = Quantization.formats()

      unless bits in all_bits,
        do:
          raise(
            ArgumentError,
            "#{where}: bits #{inspect(bits)}, MLX's affine quantization has #{Enum.join(all_bits, ", ")}"
          )

      unless group_size in group_sizes,
        do:
          raise(
            ArgumentError,
            "#{where}: group_size #{inspect(group_size)}, MLX's affine quantization has " <>
              Enum.join(group_sizes, ", ")
          )

      {bits, group_size}
    end

    defp format!(where, other),
      do:
        raise(
          ArgumentError,
          "#{where}: expected \"bits\" and \"group_size\", got: #{inspect(other)}"
        )

    # The safetensors files: those an index names, else model.safetensors.
    defp weight_files!(dir) do
      index = Path.join(dir, "model.safetensors.index.json")
      single = Path.join(dir, "model.safetensors")

      cond do
        File.exists?(index) ->
          %{"weight_map" => map} = apply(Jason, :decode!, [File.read!(index)])
          map |> Map.values() |> Enum.uniq() |> Enum.sort() |> Enum.map(&Path.join(dir, &1))

        File.exists?(single) ->
          [single]

        true ->
          raise ArgumentError,
                "#{dir}: no model.safetensors or model.safetensors.index.json"
      end
    end

    defp describe_error({kind, message}) when is_atom(kind) and is_binary(message), do: message
    defp describe_error(posix) when is_atom(posix), do: List.to_string(:file.format_error(posix))
    defp describe_error(other), do: inspect(other)

    # The quantized layers, checked: %{path => %{bits, group_size, shape
    # (logical), type (the scales'), files: %{"weight" | "scales" |
    # "biases" => file}}}. Raises naming the first tensor at fault.
    defp quantized_layers!(headers, formats) do
      tensors =
        for {file, header} <- headers, {name, {type, shape}} <- header, into: %{} do
          {name, {type, shape, file}}
        end

      # (in name order, so that the error raised is the first tensor's)
      packed =
        for {name, {{:u, 32}, _shape, _file}} <- Enum.sort(tensors),
            String.ends_with?(name, ".weight"),
            do: String.replace_suffix(name, ".weight", "")

      # scales and biases that belong to no packed weight
      packed_paths = MapSet.new(packed)

      for {name, _} <- Enum.sort(tensors),
          suffix <- [".scales", ".biases"],
          String.ends_with?(name, suffix) do
        path = String.replace_suffix(name, suffix, "")

        unless MapSet.member?(packed_paths, path),
          do:
            raise(
              ArgumentError,
              "#{name}: no packed (uint32) #{path}.weight to go with it"
            )
      end

      packed |> Enum.map(fn path -> {path, layer!(path, tensors, formats)} end) |> Map.new()
    end

    defp layer!(path, tensors, formats) do
      {_, weight_shape, weight_file} = Map.fetch!(tensors, path <> ".weight")

      {bits, group_size} =
        case Map.get(formats.layers, path, formats.default) do
          false ->
            raise ArgumentError,
                  "#{path}.weight is packed (uint32), but config.json's \"quantization\" " <>
                    "leaves #{path} unquantized"

          format ->
            format
        end

      {scales_type, scales_shape, scales_file} = part!(tensors, path, "scales")
      {biases_type, biases_shape, biases_file} = part!(tensors, path, "biases")

      if tuple_size(weight_shape) < 2,
        do:
          raise(
            ArgumentError,
            "#{path}.weight: a packed weight has rank 2 or more, got shape #{inspect(weight_shape)}"
          )

      last = tuple_size(weight_shape) - 1
      words = elem(weight_shape, last)

      if rem(words * 32, bits) != 0,
        do:
          raise(
            ArgumentError,
            "#{path}.weight: #{words} packed 32-bit words per row do not hold a whole " <>
              "number of #{bits}-bit values (config.json's bits: #{bits})"
          )

      columns = div(words * 32, bits)

      if rem(columns, group_size) != 0,
        do:
          raise(
            ArgumentError,
            "#{path}.weight: its #{columns} #{bits}-bit values per row are not whole groups " <>
              "of #{group_size} (config.json's group_size: #{group_size})"
          )

      expected = put_elem(weight_shape, last, div(columns, group_size))

      if scales_shape != expected,
        do:
          raise(
            ArgumentError,
            "#{path}.scales has shape #{inspect(scales_shape)}, but #{bits}-bit groups of " <>
              "#{group_size} over #{path}.weight's #{columns} values per row need " <>
              "#{inspect(expected)} (are config.json's bits and group_size those it was made with?)"
          )

      if biases_shape != scales_shape or biases_type != scales_type,
        do:
          raise(
            ArgumentError,
            "#{path}.biases (#{inspect(biases_type)}, shape #{inspect(biases_shape)}) differs " <>
              "from #{path}.scales (#{inspect(scales_type)}, shape #{inspect(scales_shape)})"
          )

      unless scales_type in [{:f, 32}, {:f, 16}, {:bf, 16}],
        do:
          raise(
            ArgumentError,
            "#{path}.scales: expected f32, f16 or bf16, got #{inspect(scales_type)}"
          )

      %{
        bits: bits,
        group_size: group_size,
        shape: put_elem(weight_shape, last, columns),
        type: scales_type,
        files: %{"weight" => weight_file, "scales" => scales_file, "biases" => biases_file}
      }
    end

    defp part!(tensors, path, part) do
      case Map.fetch(tensors, "#{path}.#{part}") do
        {:ok, found} ->
          found

        :error ->
          raise ArgumentError, "#{path}.weight is packed (uint32), but #{path}.#{part} is missing"
      end
    end

    # The model's parameter type: the one asked for, else the quantized
    # layers' (their scales' type, which must then be one).
    defp model_type!(_layers, type) when type != nil, do: Nx.Type.normalize!(type)

    defp model_type!(layers, nil) do
      case layers |> Map.values() |> Enum.map(& &1.type) |> Enum.uniq() do
        [type] ->
          type

        [] ->
          raise ArgumentError,
                "the folder has no quantized tensors (no uint32 *.weight with *.scales and *.biases)"

        types ->
          raise ArgumentError,
                "the quantized layers' scales have several types (#{inspect(types)}): " <>
                  "pass :type"
      end
    end

    defp spec!(repository, opts) do
      spec_opts = Keyword.take(opts, [:module, :architecture])

      case apply(Bumblebee, :load_spec, [repository, spec_opts]) do
        {:ok, spec} ->
          case opts[:spec_overrides] do
            nil -> spec
            overrides -> apply(Bumblebee, :configure, [spec, overrides])
          end

        {:error, message} ->
          raise ArgumentError, message
      end
    end

    # The state Bumblebee's loader reads: each plain tensor by its name, each
    # quantized layer as its `P.weight` (its logical tensor); read when the
    # loader takes it.
    defp state(headers, layers, type, device, {used, indices}) do
      parts = for {path, _} <- layers, part <- ~w(weight scales biases), do: "#{path}.#{part}"
      parts = MapSet.new(parts)

      plain =
        for {file, header} <- headers,
            {name, {tensor_type, shape}} <- header,
            not MapSet.member?(parts, name),
            into: %{} do
          load = fn ->
            read!(file, [name], device) |> Map.fetch!(name) |> ExMLX.Backend.to_nx()
          end

          {name, %Entry{template: Nx.template(shape, tensor_type), load: load}}
        end

      quantized =
        for {path, layer} <- layers, into: %{} do
          load = fn ->
            :counters.add(used, Map.fetch!(indices, path), 1)
            quantized_tensor(path, layer, type, device)
          end

          {"#{path}.weight", %Entry{template: Nx.template(layer.shape, type), load: load}}
        end

      Map.merge(plain, quantized)
    end

    defp quantized_tensor(path, layer, type, device) do
      # (the three parts, each file's read at once: usually all in one)
      read =
        layer.files
        |> Enum.group_by(fn {_part, file} -> file end, fn {part, _} -> "#{path}.#{part}" end)
        |> Enum.reduce(%{}, fn {file, names}, acc ->
          Map.merge(acc, read!(file, names, device))
        end)

      [packed, scales, biases] =
        for part <- ~w(weight scales biases) do
          tensor = Map.fetch!(read, "#{path}.#{part}")
          # (scales and biases in another type when one was asked for)
          if part != "weight" and tensor.type != type,
            do: ExMLX.as_type(tensor, type),
            else: tensor
        end

      q = %Quantization{
        packed: packed,
        scales: scales,
        biases: biases,
        bits: layer.bits,
        group_size: layer.group_size,
        transposed: false
      }

      %Nx.Tensor{
        shape: layer.shape,
        type: type,
        names: List.duplicate(nil, tuple_size(layer.shape)),
        data: %ExMLX.Backend{ref: nil, device: packed.device, quantization: q}
      }
    end

    # The tensors `names` of `file` (one header read), each of them there.
    defp read!(file, names, device) do
      case ExMLX.Wire.read_bundle(file, device: device, only: names) do
        {:ok, tensors} when map_size(tensors) == length(names) ->
          tensors

        {:ok, tensors} ->
          raise ArgumentError, "#{file}: #{Enum.join(names -- Map.keys(tensors), ", ")} missing"

        {:error, reason} ->
          raise ArgumentError, "#{file}: #{describe_error(reason)}"
      end
    end

    # Every quantized layer was taken by a parameter of the model, and each
    # parameter that took one is quantized (not replaced by Bumblebee's
    # initializer for a shape that did not fit).
    defp check_used!(indices, used, params) do
      unused = for {path, i} <- indices, :counters.get(used, i) == 0, do: path

      if unused != [],
        do:
          raise(
            ArgumentError,
            "quantized layers the model built from config.json has no parameter for: " <>
              Enum.join(unused, ", ")
          )

      taken = Enum.sum(for {_path, i} <- indices, do: :counters.get(used, i))
      quantized = params.data |> Enum.flat_map(fn {_, p} -> Map.values(p) end)

      quantized =
        Enum.count(quantized, &(is_struct(&1, Nx.Tensor) and Quantization.quantized?(&1)))

      if quantized < taken,
        do:
          raise(
            ArgumentError,
            "#{taken - quantized} of the quantized layers do not fit the shapes of the model " <>
              "built from config.json (load with log_params_diff: true to see which)"
          )
    end
  end
end
