package doctor

// Hooks for the external tests.
var (
	// ReadAppArmor is readAppArmor, which tests point at a fake procfs.
	ReadAppArmor = readAppArmor
	// AppArmorPaths are the paths doctor says the profile attaches to.
	AppArmorPaths = apparmorPaths
)
