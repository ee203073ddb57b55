package tool

import "path/filepath"

// WireguardSocket is the control socket wireguard-go opens for the lab
// node in netns (host-wide, outside the namespace).
func WireguardSocket(netns string) string {
	return filepath.Join("/var/run/wireguard", deviceName("wg", netns)+".sock")
}
