package ckptformat

// RowRef is row I of the file Src of a delta chain (0: its full base; j:
// its j-th delta, oldest first): a row that applying the chain keeps
// (checkpoint.ChainRows).
type RowRef struct {
	Src, I int32
}
