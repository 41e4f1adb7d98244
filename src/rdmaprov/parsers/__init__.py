"""Pure parsers of command output: text in, typed values out; tested on real captured outputs."""
