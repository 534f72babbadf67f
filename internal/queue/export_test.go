package queue

// HoldMax is holdMax, for the external tests.
const HoldMax = holdMax
