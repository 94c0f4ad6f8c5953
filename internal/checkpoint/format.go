package checkpoint

import "github.com/paramserv/paramserv/internal/ckptformat"

// The types of a checkpoint's contents live in the leaf package
// ckptformat, which the ps's state machine (package shard) builds and
// reads without importing this package; here they go by their names of
// old.
type (
	DType        = ckptformat.DType
	Tensor       = ckptformat.Tensor
	TensorInfo   = ckptformat.TensorInfo
	Shard        = ckptformat.Shard
	VariableInfo = ckptformat.VariableInfo
	Part         = ckptformat.Part
	TableInfo    = ckptformat.TableInfo
	TableSpec    = ckptformat.TableSpec
	Training     = ckptformat.Training
)

// The element types a checkpoint uses. All are little-endian on disk.
const (
	F32 = ckptformat.F32 // float32
	I64 = ckptformat.I64 // int64
	U64 = ckptformat.U64 // uint64
)

// Float32TensorFill returns an F32 tensor whose data fill makes as the
// tensor is written (ckptformat.Float32TensorFill).
func Float32TensorFill(name string, shape []int64, fill func(dst []float32, i int)) Tensor {
	return ckptformat.Float32TensorFill(name, shape, fill)
}

// Int64TensorFill is Float32TensorFill for I64.
func Int64TensorFill(name string, shape []int64, fill func(dst []int64, i int)) Tensor {
	return ckptformat.Int64TensorFill(name, shape, fill)
}

// Uint64TensorFill is Float32TensorFill for U64.
func Uint64TensorFill(name string, shape []int64, fill func(dst []uint64, i int)) Tensor {
	return ckptformat.Uint64TensorFill(name, shape, fill)
}

// Float32TensorOf returns an F32 tensor of v's elements without copying
// them where it can (ckptformat.Float32TensorOf).
func Float32TensorOf(name string, shape []int64, v []float32) Tensor {
	return ckptformat.Float32TensorOf(name, shape, v)
}

// Int64TensorOf is Float32TensorOf for I64.
func Int64TensorOf(name string, shape []int64, v []int64) Tensor {
	return ckptformat.Int64TensorOf(name, shape, v)
}

// Uint64TensorOf is Float32TensorOf for U64.
func Uint64TensorOf(name string, shape []int64, v []uint64) Tensor {
	return ckptformat.Uint64TensorOf(name, shape, v)
}

// Float32Tensor returns an F32 tensor holding a copy of v.
func Float32Tensor(name string, shape []int64, v []float32) Tensor {
	return ckptformat.Float32Tensor(name, shape, v)
}

// Int64Tensor returns an I64 tensor holding a copy of v.
func Int64Tensor(name string, shape []int64, v []int64) Tensor {
	return ckptformat.Int64Tensor(name, shape, v)
}

// Uint64Tensor returns a U64 tensor holding a copy of v.
func Uint64Tensor(name string, shape []int64, v []uint64) Tensor {
	return ckptformat.Uint64Tensor(name, shape, v)
}

// SlotName is the tensor name of a variable's or table's state slot:
// SlotName("hid_w", "adam_m") is "hid_w/adam_m".
func SlotName(base, slot string) string { return ckptformat.SlotName(base, slot) }

// KeysName is the tensor name of a sparse table's keys.
func KeysName(table string) string { return ckptformat.KeysName(table) }

// DeletedName is the tensor name of the keys a delta shard drops from a
// sparse table.
func DeletedName(table string) string { return ckptformat.DeletedName(table) }

// ValuesName is the tensor name of a sparse table's values.
func ValuesName(table string) string { return ckptformat.ValuesName(table) }

// IndexName is the tensor name of a sparse table's saved index (see
// Shard.Indexed).
func IndexName(table string) string { return ckptformat.IndexName(table) }

// Contents is what m holds, as a ps that restores it reads it: its
// training record read (an error names a malformed field), beside its
// step, cluster shape and placement.
func (m Manifest) Contents() (ckptformat.Contents, error) {
	t, err := m.Training()
	if err != nil {
		return ckptformat.Contents{}, err
	}
	return ckptformat.Contents{
		Step: m.Step, NumPS: m.NumPS, NumShards: len(m.Shards),
		Variables: m.Variables, Tables: m.Tables, Training: t,
	}, nil
}
