package schema

// SetAfterStep makes f run after each step of the upgrade from the
// unprefixed layout, inside its transaction: the crash test kills the
// process there.
func SetAfterStep(f func(step string)) { afterStep = f }
