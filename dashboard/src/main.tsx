import { render } from "preact";
import "./styles.css";
import "./session";
import { App } from "./app";

render(<App />, document.getElementById("app")!);
