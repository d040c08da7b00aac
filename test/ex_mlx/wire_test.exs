defmodule ExMLX.WireTest do
  use ExUnit.Case, async: true
  doctest ExMLX.Wire

  import ExMLX.TestHelpers
  alias ExMLX.Wire

  @types ExMLX.TestHelpers.types()

  defp round_trip(t) do
    frame = Wire.encode(t)
    {:ok, back} = Wire.decode(frame, device: t.device)
    assert back.shape == t.shape
    assert back.type == t.type
    assert ExMLX.to_binary(back) == ExMLX.to_binary(t)
    frame
  end

  describe "frames" do
    test "every type round-trips bit for bit, rank 0 and empty included" do
      for type <- @types do
        t = ExMLX.iota({:s, 32}, {2, 3}, device: device_for(type)) |> ExMLX.as_type(type)
        round_trip(t)
        round_trip(ExMLX.slice(t, [1, 2], [2, 3]) |> ExMLX.squeeze())
        round_trip(ExMLX.slice(t, [0, 0], [0, 3]))
      end
    end

    test "views are written in logical order" do
      t = ExMLX.iota({:s, 32}, {3, 4})
      # transpose, slice with an offset, broadcast
      for view <- [
            ExMLX.transpose(t),
            ExMLX.slice(t, [1, 1], [3, 4]),
            ExMLX.broadcast_to(ExMLX.slice(t, [2, 0], [3, 4]), {5, 4})
          ] do
        {:ok, back} = view |> Wire.encode() |> Wire.decode()
        assert ExMLX.to_list(back) == ExMLX.to_list(view)
      end
    end

    test "NaN payloads, infinities and -0.0 survive bit for bit" do
      f32 =
        <<0x7FC00001::32-little, 0xFF800000::32-little, 0x7F800000::32-little,
          0x80000000::32-little>>

      f64 = <<0x7FF8000000000ABC::64-little, 0x8000000000000000::64-little>>
      f16 = <<0x7E01::16-little, 0x8000::16-little, 0xFC00::16-little>>
      bf16 = <<0x7FC1::16-little, 0x8000::16-little>>

      for {bin, type, n} <- [
            {f32, {:f, 32}, 4},
            {f64, {:f, 64}, 2},
            {f16, {:f, 16}, 3},
            {bf16, {:bf, 16}, 2}
          ] do
        t = ExMLX.from_binary(bin, type, {n}, device: device_for(type))
        {:ok, back} = t |> Wire.encode() |> Wire.decode(device: t.device)
        assert ExMLX.to_binary(back) == bin
      end
    end

    test "frames of every size and state round-trip, on the calling thread or the worker" do
      # Computed CPU tensors are encoded and decoded on the calling thread
      # (a normal scheduler up to 64 KB of data, a dirty one above 4 MB) or
      # on the worker (in between; ExMLX.Call.copy_path/2); lazy ones and
      # views are computed by the worker first. The bytes are the same.
      for n <- [0, 1, 1000, 16_384, 16_385, 1_048_576, 1_048_577] do
        data = for i <- 0..(n - 1)//1, into: <<>>, do: <<i * 1.5::32-float-little>>
        computed = ExMLX.from_binary(data, {:f, 32}, {n})
        lazy = ExMLX.add(computed, ExMLX.full(0.0, {:f, 32}, {}))
        evaluated = ExMLX.eval(ExMLX.multiply(computed, ExMLX.full(1.0, {:f, 32}, {})))

        for t <- [computed, lazy, evaluated] do
          frame = Wire.encode(t)
          assert byte_size(frame) == 20 + 8 + byte_size(data)
          assert binary_part(frame, byte_size(frame), -byte_size(data)) == data
          assert Wire.decode!(frame) |> ExMLX.to_binary() == data
        end
      end

      # an evaluated view (not row-contiguous) is made contiguous by the worker
      m = ExMLX.iota({:s, 32}, {2, 3}) |> ExMLX.transpose() |> ExMLX.eval()
      assert Wire.encode(m) |> Wire.decode!() |> ExMLX.to_list() == [0, 3, 1, 4, 2, 5]
    end

    test "the frame layout is the documented one" do
      t = ExMLX.from_binary(<<1, 2, 3>>, {:u, 8}, {3})
      frame = Wire.encode(t)
      # magic, version 1, code 2 (u8), rank 1, reserved, dim 3, length 3, crc, data
      assert <<"EXMX", 1, 2, 1, 0, 3::64-little, 3::64-little, crc::32-little, 1, 2, 3>> = frame
      assert crc == :erlang.crc32(binary_part(frame, 0, 24) <> <<1, 2, 3>>)
    end

    test "each malformation is a distinct error" do
      good = Wire.encode(ExMLX.from_binary(<<1, 0, 2, 0>>, {:s, 16}, {2}))
      <<head::binary-size(24), crc::binary-size(4), data::binary>> = good

      cases = [
        {"XXXX" <> binary_part(good, 4, byte_size(good) - 4), :bad_magic},
        {put(good, 4, 7), :unsupported_version},
        {put(good, 5, 200), :unknown_dtype},
        {put(good, 6, 40), :bad_rank},
        {binary_part(good, 0, 12), :truncated},
        {binary_part(good, 0, byte_size(good) - 1), :truncated},
        {good <> <<0>>, :trailing_bytes},
        {binary_part(head, 0, 8) <> <<-1::64-little>> <> binary_part(head, 16, 8) <> crc <> data,
         :size_overflow},
        {binary_part(head, 0, 16) <> <<5::64-little>> <> crc <> data, :length_mismatch},
        {head <> crc <> <<9, 9, 9, 9>>, :checksum_mismatch}
      ]

      for {frame, kind} <- cases do
        assert {:error, {^kind, message}} = Wire.decode(frame)
        assert is_binary(message) and message != ""
      end

      bools = Wire.encode(ExMLX.from_binary(<<1, 0>>, :bool, {2}))
      <<h::binary-size(24), _crc::binary-size(4), _::binary>> = bools
      bad = h <> <<:erlang.crc32(h <> <<1, 2>>)::32-little>> <> <<1, 2>>
      assert {:error, {:invalid_bool, _}} = Wire.decode(bad)
      assert {:error, {:argument, _}} = Wire.decode(:not_binary)

      assert_raise ExMLX.Error, ~r/CRC-32 mismatch/, fn ->
        Wire.decode!(head <> crc <> <<9, 9, 9, 9>>)
      end
    end

    defp put(bin, at, byte) do
      <<pre::binary-size(at), _, post::binary>> = bin
      pre <> <<byte>> <> post
    end
  end

  describe "bundles" do
    @tag :tmp_dir
    test "round-trip through a binary and a file, every type", %{tmp_dir: dir} do
      tensors =
        Map.new(@types, fn type ->
          {inspect(type),
           ExMLX.iota({:s, 32}, {2, 3}, device: device_for(type)) |> ExMLX.as_type(type)}
        end)

      tensors = Map.put(tensors, "scalar", ExMLX.full(-0.0, {:f, 64}, {}, device: :cpu))
      tensors = Map.put(tensors, "empty", ExMLX.from_binary(<<>>, {:f, 32}, {0, 4}))

      # (on the CPU: the bundle holds f64 tensors, see device_for/1)
      bundle = Wire.encode_bundle(tensors, %{"by" => "ExMLX"})
      {:ok, decoded} = Wire.decode_bundle(bundle, device: device_for({:f, 64}))
      path = Path.join(dir, "all.safetensors")
      :ok = Wire.write_bundle(path, tensors)
      {:ok, read} = Wire.read_bundle(path, device: device_for({:f, 64}))

      for {name, t} <- tensors, result <- [decoded, read] do
        assert result[name].shape == t.shape, name
        assert result[name].type == t.type, name
        assert ExMLX.to_binary(result[name]) == ExMLX.to_binary(t), name
      end
    end

    @tag :tmp_dir
    test "a file's header alone, and some of its tensors", %{tmp_dir: dir} do
      tensors = %{
        "a.weight" => ExMLX.iota({:u, 32}, {3, 2}),
        "a.scales" => ExMLX.full(0.5, {:bf, 16}, {3, 1}),
        "b" => ExMLX.full(1, {:s, 8}, {})
      }

      path = Path.join(dir, "some.safetensors")
      :ok = Wire.write_bundle(path, tensors)

      assert Wire.read_bundle_header(path) ==
               {:ok,
                %{
                  "a.weight" => {{:u, 32}, {3, 2}},
                  "a.scales" => {{:bf, 16}, {3, 1}},
                  "b" => {{:s, 8}, {}}
                }}

      {:ok, some} = Wire.read_bundle(path, only: ["a.scales", "missing"])
      assert Map.keys(some) == ["a.scales"]
      assert ExMLX.to_binary(some["a.scales"]) == ExMLX.to_binary(tensors["a.scales"])

      assert Wire.read_bundle(path, only: [:b]) ==
               {:error, {:argument, ":only: expected a list of tensor names, got: [:b]"}}

      assert Wire.read_bundle_header(Path.join(dir, "none.safetensors")) == {:error, :enoent}
      File.write!(Path.join(dir, "short.safetensors"), <<1, 2, 3>>)

      assert Wire.read_bundle_header(Path.join(dir, "short.safetensors")) ==
               {:error, {:bad_header_length, "a bundle starts with an 8-byte header length"}}

      assert_raise ArgumentError, "path: expected a string, got: 7", fn ->
        Wire.read_bundle_header(7)
      end
    end

    test "bad bundle headers are distinct errors" do
      json = ~s({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})
      bundle = <<byte_size(json)::64-little>> <> json <> <<0, 0, 0, 0>>
      assert {:error, {:length_mismatch, _}} = Wire.decode_bundle(bundle)
      assert {:error, {:bad_header_length, _}} = Wire.decode_bundle(<<1000::64-little, "{}">>)
      assert {:error, {:invalid_header, _}} = Wire.decode_bundle(<<4::64-little, "nope">>)
      json = ~s({"x": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}})

      assert {:error, {:unknown_dtype, _}} =
               Wire.decode_bundle(<<byte_size(json)::64-little>> <> json <> <<0>>)

      json =
        ~s({"x": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, "y": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})

      assert {:error, {:overlapping_offsets, _}} =
               Wire.decode_bundle(<<byte_size(json)::64-little>> <> json <> <<0, 0, 0>>)

      json = ~s({"x": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})

      assert {:error, {:offsets_out_of_range, _}} =
               Wire.decode_bundle(<<byte_size(json)::64-little>> <> json <> <<0, 0>>)
    end
  end

  describe "interop with Python's safetensors" do
    @script Path.expand("../support/safetensors_interop.py", __DIR__)

    @tag :tmp_dir
    test "files ExMLX writes load in Python with identical bytes", %{tmp_dir: dir} do
      tensors =
        for type <- @types, into: %{} do
          {"t_" <> String.replace(inspect(type), ~r/[^a-z0-9]/, ""),
           ExMLX.iota({:s, 32}, {2, 3}, device: device_for(type)) |> ExMLX.as_type(type)}
        end

      tensors =
        Map.put(
          tensors,
          "special",
          ExMLX.from_binary(<<0x7FC00001::32-little, 0x80000000::32-little>>, {:f, 32}, {2})
        )

      path = Path.join(dir, "ours.safetensors")
      :ok = Wire.write_bundle(path, tensors)
      {out, 0} = ExMLX.TestHelpers.python(@script, ["read", path])

      lines = String.split(out, "\n", trim: true)
      assert length(lines) == map_size(tensors)

      for line <- lines do
        [name, _dtype, _shape, hex] =
          String.split(line, " ") ++ if String.ends_with?(line, " "), do: [""], else: []

        assert Base.decode16!(hex, case: :lower) == ExMLX.to_binary(tensors[name]), name
      end
    end

    @tag :tmp_dir
    test "files Python writes load in ExMLX with the values Python wrote", %{tmp_dir: dir} do
      path = Path.join(dir, "theirs.safetensors")
      {_, 0} = ExMLX.TestHelpers.python(@script, ["write", path])
      # (Python's file holds an F64 tensor: on the CPU, see device_for/1)
      {:ok, tensors} = Wire.read_bundle(path, device: device_for({:f, 64}))

      ints = fn size, signed? ->
        for i <- 0..5,
            into: <<>>,
            do: if(signed?, do: <<i::signed-size(size)-little>>, else: <<i::size(size)-little>>)
      end

      expected = %{
        "U8" => ints.(8, false),
        "U16" => ints.(16, false),
        "U32" => ints.(32, false),
        "U64" => ints.(64, false),
        "I8" => ints.(8, true),
        "I16" => ints.(16, true),
        "I32" => ints.(32, true),
        "I64" => ints.(64, true),
        "F16" => floats(Enum.to_list(0..5), 16),
        "F32" => floats(Enum.to_list(0..5), 32),
        "F64" => floats(Enum.to_list(0..5), 64),
        # bf16: the top halves of the f32 values
        "BF16" =>
          for(<<_lo::16, hi::16 <- floats(Enum.to_list(0..5), 32)>>, into: <<>>, do: <<hi::16>>),
        "BOOL" => <<1, 0, 1, 1, 0, 0>>,
        "C64" =>
          for(i <- 0..5, into: <<>>, do: <<i * 1.0::32-float-little, -i * 1.0::32-float-little>>)
      }

      for {name, bytes} <- expected do
        assert tensors[name].shape == {2, 3}, name
        assert ExMLX.to_binary(tensors[name]) == bytes, name
      end

      assert ExMLX.to_binary(tensors["scalar_F64"]) == <<0x8000000000000000::64-little>>
      assert tensors["empty_F32"].shape == {0, 4}
    end
  end
end
