# Minimal JSON for the benchmark scripts (no dependencies): encodes maps,
# lists, strings, numbers and atoms; decodes what Python's json.dumps writes
# for numbers, strings and nested objects.
defmodule Bench.JSON do
  def encode(map) when is_map(map),
    do:
      "{" <>
        Enum.map_join(map, ",", fn {k, v} ->
          encode(to_string(k)) <> ":" <> encode(v)
        end) <> "}"

  def encode(list) when is_list(list),
    do: "[" <> Enum.map_join(list, ",", &encode/1) <> "]"

  def encode(s) when is_binary(s), do: inspect(s, printable_limit: :infinity)
  def encode(nil), do: "null"
  def encode(b) when is_boolean(b), do: to_string(b)
  def encode(a) when is_atom(a), do: encode(Atom.to_string(a))
  def encode(n) when is_number(n), do: to_string(n)

  # Python's json.dumps of numbers, strings and nested objects, parsed.
  def decode(nil), do: {:error, :no_output}

  def decode(text) do
    {value, _rest} = parse_value(String.trim(text))
    {:ok, value}
  rescue
    _ -> {:error, {:bad_json, text}}
  end

  defp parse_value("{" <> rest), do: parse_object(skip(rest), %{})
  defp parse_value("\"" <> rest), do: parse_string(rest, "")
  defp parse_value("null" <> rest), do: {nil, rest}
  defp parse_value("true" <> rest), do: {true, rest}
  defp parse_value("false" <> rest), do: {false, rest}

  defp parse_value(text) do
    [number] = Regex.run(~r/^-?[0-9.eE+-]+/, text)
    rest = binary_part(text, byte_size(number), byte_size(text) - byte_size(number))

    value =
      if String.contains?(number, [".", "e", "E"]),
        do: String.to_float(normalize(number)),
        else: String.to_integer(number)

    {value, rest}
  end

  defp normalize(n),
    do: if(String.contains?(n, "."), do: n, else: String.replace(n, ~r/e/i, ".0e"))

  defp parse_object("}" <> rest, acc), do: {acc, rest}

  defp parse_object(text, acc) do
    {key, rest} = parse_value(text)
    ":" <> rest = skip(rest)
    {value, rest} = parse_value(skip(rest))

    case skip(rest) do
      "," <> rest -> parse_object(skip(rest), Map.put(acc, key, value))
      "}" <> rest -> {Map.put(acc, key, value), rest}
    end
  end

  defp parse_string("\"" <> rest, acc), do: {acc, rest}

  defp parse_string("\\" <> <<c::utf8, rest::binary>>, acc),
    do: parse_string(rest, acc <> <<c::utf8>>)

  defp parse_string(<<c::utf8, rest::binary>>, acc), do: parse_string(rest, acc <> <<c::utf8>>)

  defp skip(text), do: String.trim_leading(text)
end
