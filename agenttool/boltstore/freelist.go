package boltstore

import bolt "go.etcd.io/bbolt"

// boltOptions are the bbolt options of a store's file. Two differ from
// bbolt's defaults, so that a commit costs the same whatever the free space
// in the file (see "The file over days" in the package documentation):
//
//   - The freelist is kept as a hash map of free spans (FreelistMapType),
//     not as a sorted array: allocating a page does not scan every free
//     page, nor does releasing one merge the whole array.
//   - The freelist is not written with each commit (NoFreelistSync): it is
//     derived data, rebuilt at Open by walking the pages the last committed
//     root reaches. A commit then writes only the pages it changed, and
//     Open reads the file once.
func boltOptions(o Options) *bolt.Options {
	return &bolt.Options{
		Timeout:        o.LockTimeout,
		ReadOnly:       o.ReadOnly,
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: true,
	}
}
