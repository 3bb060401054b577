// No inline script or style is allowed on this page: its CSP says so.
document.getElementById("contact").addEventListener("submit", (e) => {
  e.preventDefault();
  document.getElementById("result").textContent = `Sent: ${document.getElementById("message").value}`;
});
