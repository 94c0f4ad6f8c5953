package format

// DenseBlock is the number of float32 values of a dense block, the unit of
// incremental dense pulls: each variable of a ps is cut into blocks of
// DenseBlock values (the last one shorter), numbered over the variables in
// the order the reply lists them. 64 KiB a block: a version per block
// costs the ps nothing to keep and the request one bit to name, and a
// variable rarely changes in part at a finer grain than that.
const DenseBlock = 1 << 14

// DenseBlocks is the number of blocks of a variable of n values.
func DenseBlocks(n int) int { return (n + DenseBlock - 1) / DenseBlock }

// MaxName bounds a variable or table name: the data path carries names of
// at most this many bytes, so the ps refuses a longer one at Init.
const MaxName = 1024
