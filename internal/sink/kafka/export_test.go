package kafka

// ClassifyError exposes classify to the black-box tests.
var ClassifyError = classify
