# Linux adapter (see README.md here): build mlx-c against the prebuilt MLX instead of
# downloading and compiling MLX from GitHub.
#
# mlx-sys's build script runs CMake on mlx-c, whose CMakeLists FetchContent's
# MLX v0.32.2 unless MLX_C_USE_SYSTEM_MLX is on. CMake reads this file through
# the CMAKE_TOOLCHAIN_FILE environment variable (set by the ex_mlx_native Mix
# compiler), so mlx-sys itself stays unmodified.
#
# EX_MLX_CMAKE_DIR is the folder holding MLXConfig.cmake of the MLX runtime
# (<prefix>/share/cmake/MLX).
set(MLX_C_USE_SYSTEM_MLX ON CACHE BOOL "use the prebuilt MLX runtime" FORCE)
set(MLX_C_BUILD_EXAMPLES OFF CACHE BOOL "mlx-c examples are not needed" FORCE)
set(MLX_DIR "$ENV{EX_MLX_CMAKE_DIR}" CACHE PATH "folder of MLXConfig.cmake" FORCE)
