package emulator

// LossCounts is what the program counted on one device.
type LossCounts struct {
	Seen    uint64 // IP packets that reached the program (others pass undrawn)
	Dropped uint64 // of which dropped
	Unsplit uint64 // segmentation offload packets drawn as one (see KernelLoss)
}
