// The pod sandbox process of the bed's real nodes (image draconf.local/pause:3.10, built by
// draconf/testbed/images.py).  Standard library only, so it builds without the module proxy.
module draconf.local/testbed/pause

go 1.26
