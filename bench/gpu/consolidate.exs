# Consolidates every protocol found on the code path over the
# implementations found there, writing each consolidated protocol's .beam
# into OUT_DIR, as Mix does into a build's `consolidated/` folder
# (bench/gpu/stage.sh: the staged machine runs without Mix, and an
# unconsolidated protocol looks its implementation up at every call).
#
#   elixir -pa APP/ebin ... bench/gpu/consolidate.exs OUT_DIR
out =
  case System.argv() do
    [out] -> out
    _ -> raise ArgumentError, "usage: consolidate.exs OUT_DIR"
  end

File.mkdir_p!(out)
paths = Enum.map(:code.get_path(), &List.to_string/1)
protocols = Protocol.extract_protocols(paths)

for protocol <- protocols do
  {:ok, binary} = Protocol.consolidate(protocol, Protocol.extract_impls(protocol, paths))
  File.write!(Path.join(out, "#{protocol}.beam"), binary)
end

IO.puts("consolidated #{length(protocols)} protocols into #{out}")
