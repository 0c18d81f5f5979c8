"""The HTTP surfaces: the views a project mounts (``urls``: /metrics, the stats JSON, the
progress polling view), task progress for users (``progress``), the live dashboard
(``live``), and what they share with the admin (``common``). The admin imports this
package; nothing here imports the admin."""
