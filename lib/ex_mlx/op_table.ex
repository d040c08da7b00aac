defmodule ExMLX.OpTable do
  @moduledoc false
  # The op table, read at compile time from its one source,
  # native/ex_mlx/core/src/ops/table.rs (whose module documentation gives
  # the entry syntax). The `ExMLX` module generates a function per op from
  # it; `ExMLX.Native.op_table/0` returns the same table from the compiled
  # NIF, and test/ex_mlx/op_table_test.exs checks that the two agree.
  #
  # An entry is a map:
  #
  #   * `:name`, `:family` - atoms
  #   * `:inputs` - a list of input names, or `{:list, name}`
  #   * `:params` - `%{name:, kind:, default:, positional:}` each; `kind` an
  #     atom such as `:OptInts`, `default` an Elixir expression (a string) or
  #     nil, `positional` true when `#[positional]`
  #   * `:results` - a type rule (atom) per result
  #   * `:flags` - atoms: `:view`, `:cpu`, `:nx`, `:custom`
  #   * `:doc` - the entry's `///` lines

  @source Path.expand("../../native/ex_mlx/core/src/ops/table.rs", __DIR__)
  @external_resource @source

  @doc "The path of the table's source."
  def source, do: @source

  defmodule Parser do
    @moduledoc false
    # Reads table.rs's text (a module of its own: ExMLX.OpTable uses it
    # while it compiles).

    @doc "Parses the table from the text of table.rs."
    def parse(text) do
      [_macro, body] = String.split(text, ~r/^op_table! \{$/m, parts: 2)

      {entries, _family, _doc} =
        body
        |> String.split("\n")
        |> Enum.reduce({[], nil, []}, &parse_line/2)

      Enum.reverse(entries)
    end

    @family ~r/^    (\w+) \{$/
    @doc_line ~r/^\s*\/\/\/ ?(.*)$/
    @entry ~r/^\s*(\w+)\((.*)\)\s*->\s*(\[[^\]]*\]|\w+)\s*(\[[^\]]*\])?\s*=>/

    defp parse_line(line, {entries, family, doc}) do
      cond do
        match = Regex.run(@family, line) ->
          {entries, String.to_atom(Enum.at(match, 1)), []}

        match = Regex.run(@doc_line, line) ->
          {entries, family, [Enum.at(match, 1) | doc]}

        match = Regex.run(@entry, line) ->
          [_, name, signature, results | flags] = match
          {inputs, params} = parse_signature(signature)

          entry = %{
            name: String.to_atom(name),
            family: family,
            inputs: inputs,
            params: params,
            results: parse_list(results),
            flags: parse_list(Enum.at(flags, 0, "")),
            doc: doc |> Enum.reverse() |> Enum.join("\n")
          }

          {[entry | entries], family, []}

        true ->
          {entries, family, doc}
      end
    end

    defp parse_signature(signature) do
      {inputs, params} =
        case String.split(signature, ";", parts: 2) do
          [inputs, params] -> {inputs, params}
          [inputs] -> {inputs, ""}
        end

      inputs =
        case String.trim(inputs) do
          "" ->
            []

          ".." <> list ->
            {:list, String.to_atom(list)}

          names ->
            names |> String.split(",") |> Enum.map(&(&1 |> String.trim() |> String.to_atom()))
        end

      params =
        params
        |> String.split(",", trim: true)
        |> Enum.map(&parse_param/1)

      {inputs, params}
    end

    @param ~r/^\s*(#\[positional\]\s*)?(\w+)\s*:\s*(\w+)\s*(?:=\s*"([^"]*)")?\s*$/

    defp parse_param(text) do
      case Regex.run(@param, text) do
        [_, positional, name, kind | default] ->
          %{
            name: name |> String.trim_trailing("_") |> String.to_atom(),
            kind: String.to_atom(kind),
            default: List.first(default),
            positional: positional != ""
          }

        nil ->
          raise CompileError,
            description: "op table: cannot read the parameter #{inspect(text)} in table.rs"
      end
    end

    defp parse_list("[" <> rest) do
      rest
      |> String.trim_trailing("]")
      |> String.split(",", trim: true)
      |> Enum.map(&(&1 |> String.trim() |> String.to_atom()))
    end

    defp parse_list(""), do: []
    defp parse_list(word), do: [String.to_atom(word)]
  end

  @entries @source |> File.read!() |> Parser.parse()

  @doc "Every entry, in table order."
  def entries, do: @entries

  @doc "The entry of op `name`."
  def fetch!(name)

  # one clause per op, not a search of the list: ExMLX.Op looks an op up for
  # each node it records
  for entry <- @entries do
    def fetch!(unquote(entry.name)), do: unquote(Macro.escape(entry))
  end

  def fetch!(name), do: raise(KeyError, key: name)

  @doc "The names of the ops of `family`."
  def names(family), do: for(%{family: ^family, name: name} <- @entries, do: name)
end
