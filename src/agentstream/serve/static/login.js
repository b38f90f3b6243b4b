// Come back to the page that asked for the token once it is accepted.
"use strict";
document.getElementById("next").value = location.pathname;
