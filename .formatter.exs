[
  inputs: ["{mix,.formatter}.exs", "{config,lib,test,bench,mix,bin}/**/*.{ex,exs}"]
]
