// Come back to the page that asked for the token once it is accepted. The form posts to
// /login?next=PAGE, so after a wrong token (answered there) the page is still known.
"use strict";
const params = new URLSearchParams(location.search);
const retried = location.pathname === "/login" && params.has("next");
const next = location.pathname === "/login" ? params.get("next") || "/" : location.pathname + location.search;
document.getElementById("next").value = next;
document.querySelector("form.login").action = `/login?next=${encodeURIComponent(next)}`;
document.getElementById("refused").hidden = !retried;
